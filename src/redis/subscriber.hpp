// Release notifications for waiters: ONE pub/sub connection per client, shared by every waiting
// lock. With several servers (Redlock: releases publish on all of them) it subscribes on one and
// moves to the next when that connection fails. Waiters register a channel before their retry
// attempt (so a release in between is not missed) and sleep until a message bumps the channel's
// generation or their own deadline passes. Pub/sub is lossy, so waiters also always carry a
// deadline (the holder's remaining lease).
//
// The client's background thread owns the connection: it sends (UN)SUBSCRIBE, reads messages,
// reconnects with backoff and, after a reconnect, wakes every waiter (messages may have been lost).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "redis/connection.hpp"

namespace dlock::redis::detail {

class subscriber {
public:
    /// `wake` is called (with no lock held) when the background thread must act on new requests.
    subscriber(std::vector<connection_settings> servers, std::function<void()> wake);

    /// RAII registration of one waiter on one channel.
    class registration {
    public:
        registration(subscriber& owner, std::string channel);
        ~registration();
        registration(const registration&) = delete;
        registration& operator=(const registration&) = delete;
        /// The channel's message count so far; pass it to wait() after the next attempt.
        std::uint64_t generation() const;
        /// Waits until the server confirmed the subscription, or `deadline`.
        void wait_subscribed(steady::time_point deadline, const std::stop_token& cancel) const;
        /// Sleeps until a message newer than `seen` arrived, or `deadline`.
        void wait(std::uint64_t seen, steady::time_point deadline,
                  const std::stop_token& cancel) const;
        /// The payload of the channel's latest message (empty before the first).
        std::string last_message() const;

    private:
        subscriber& owner_;
        std::string channel_;
    };

    // --- background thread side ---
    /// Sends pending (UN)SUBSCRIBEs, reconnecting first if needed (with backoff), blocking no later
    /// than `latest`. Returns the descriptor to poll for messages, or -1 when idle or disconnected.
    int service(steady::time_point now, steady::time_point latest);
    /// Reads and dispatches every message already available.
    void on_readable();
    /// When service() wants to be called again at the latest (reconnect backoff, a lingering
    /// subscription to drop).
    steady::time_point next_retry() const;
    /// Wakes every waiter (shutdown).
    void wake_all();
    /// Makes every sleeping waiter re-check its predicate (a cancel was requested).
    void interrupt();

private:
    struct channel_state {
        int waiters = 0;
        std::uint64_t generation = 0;
        bool subscribed = false;          // confirmed by the server
        bool requested = false;           // SUBSCRIBE sent, not yet confirmed
        steady::time_point idle_since{};  // when the last waiter left
        std::string last_message;
    };
    steady::time_point next_linger_expiry_locked() const;
    void dispatch(const reply& r);
    void reset_connection();
    /// Closes the connection; with several servers the next attempt goes to the next one.
    void move_to_next_server();
    /// Doubles the reconnect delay (within [min, max]) and schedules the next attempt.
    void back_off_locked();

    const std::vector<connection_settings> servers_;
    std::function<void()> wake_;
    std::size_t server_ = 0;            // background thread only
    std::unique_ptr<connection> conn_;  // background thread only

    mutable std::mutex mutex_;  // guards channels_, dirty_, reconnect_at_, backoff_
    mutable std::condition_variable changed_;
    std::unordered_map<std::string, channel_state> channels_;
    bool dirty_ = false;  // channels_ changed since the last service()
    steady::time_point reconnect_at_{};
    std::chrono::milliseconds backoff_{0};
};

}  // namespace dlock::redis::detail
