// Release notifications for waiters: ONE pub/sub connection per client (on Redlock one per node,
// each a subscriber of its own: see the end of this comment), shared by every waiting lock. Given
// several nodes that all carry every release, it subscribes on one and moves to the next when that
// connection fails. Waiters register a channel before their retry
// attempt (so a release in between is not missed) and sleep until a message wakes them or their
// own deadline passes. Pub/sub is lossy, so waiters also always carry a deadline (the holder's
// remaining lease).
//
// A message wakes every waiter of its channel (wake_mode::all: semaphores, readers) or only one of
// them (wake_mode::one: kinds where a release lets exactly one waiter in). A hand-off channel is
// one per client and lock name, shared by that client's queued waiters and subscribed once: a
// waiter registers there with its token as `key`, and a message "granted <fence> <ticket> <token>"
// goes to the waiter of that token only (its own latest message, its own generation), as if each
// waiter had a channel of its own (the fair and write kinds, and registered dlock::mutex waiters).
// A waiter woken by a wake_mode::one message that gives up without the lock passes its wake-up to
// the next; one whose attempt found the lock taken drops it, because that holder's release
// publishes again.
//
// The client's background thread owns the connection: it sends (UN)SUBSCRIBE, reads messages,
// reconnects with backoff and, after a reconnect, wakes every waiter (messages may have been lost).
// While a waiter is in wait() the connection is lent to it (one waiter at a time, and only while
// the background thread is not using it): that thread polls the connection itself and dispatches
// what it reads to every waiter, so the message it waits for wakes it directly, not through the
// background thread and a condition variable (one wake-up fewer on the hand-off's path). The
// background thread stops polling the connection while it is lent, and takes it back (the reader
// is woken through an eventfd and falls back to the condition variable) when it has work on it:
// a SUBSCRIBE or UNSUBSCRIBE to send, a lingering channel to drop, a node that moved. A reader
// that leaves while other waiters sleep, or with work pending, wakes the background thread to
// read for them; one that leaves alone does not. The background thread reads only for someone (a
// waiter asleep on a condition variable, a SUBSCRIBE to confirm): other messages (for a waiter
// between two attempts, for a lingering channel) wait in the socket, in order, for the next reader.
// A SUBSCRIBE's confirmation wakes the channel's waiters too: one that attempted before it (late
// confirmation, reconnect) may have missed a release published before the server subscribed.
// It never blocks past the `latest` it is given, and it sleeps while it has nothing to do: with the
// connection down and nobody waiting it forgets every channel instead of retrying.
//
// Redlock's hand-off (docs/redlock.md, "Waiting") needs each node's grant: a subscriber per node,
// and one thread waiting on a registration in each. Such a registration is made with a `signal`,
// raised with every change that would end its wait() (a message for its key, the channel's
// confirmation, a reconnect). The thread borrows every node's connection at once when all can be
// lent (read_lent) and polls them itself, as one waiter does on one server, so each node's grant
// wakes it directly; else it sleeps on that signal, holding a `reading` so that each background
// thread reads for it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include <poll.h>

#include <dlock/detail/thread_safety.hpp>

#include "core/event_fd.hpp"
#include "redis/connection.hpp"
#include "redis/node.hpp"

namespace dlock::redis::detail {

/// Wakes a thread that waits on registrations of several subscribers at once (see the file
/// comment). Raised with its subscriber's mutex held: it takes only its own.
class signal {
public:
    /// Moves with each raise(): read it before an attempt, pass it to wait() after.
    std::uint64_t version() const noexcept { return version_.load(); }
    void raise();
    /// Sleeps until version() != `seen`, `deadline`, or a stop request on `cancel`.
    void wait(std::uint64_t seen, steady::time_point deadline, const std::stop_token& cancel);

private:
    std::atomic<std::uint64_t> version_{0};
    dlock::detail::mutex mutex_;
    std::condition_variable changed_;
};

class subscriber {
public:
    /// `wake(by)` is called (with no lock held) when the background thread must call service()
    /// no later than `by`: time_point::min() for a SUBSCRIBE that a waiter waits for, a later
    /// time for a lingering channel to drop (nobody waits for that; it may come late).
    /// `servers`: the nodes any of which carries every release; the connection goes to a node's
    /// current address (a node that moved is reconnected at the next service()).
    subscriber(std::vector<std::shared_ptr<node>> servers,
               std::function<void(steady::time_point by)> wake);

    enum class wake_mode {
        all,  ///< a message wakes every waiter of the channel
        one,  ///< a message wakes one waiter of the channel (see the file comment)
    };

    /// RAII registration of one waiter on one channel. Used by one thread at a time.
    class registration {
    public:
        /// `key` non-empty: a keyed waiter of a hand-off channel (see the file comment).
        /// `also`: raised with every change that would end wait() (see the file comment).
        registration(subscriber& owner, std::string channel, wake_mode mode = wake_mode::all,
                     std::string key = {}, signal* also = nullptr);
        ~registration();
        registration(const registration&) = delete;
        registration& operator=(const registration&) = delete;
        /// The channel's message count so far; pass it to wait() after the next attempt.
        std::uint64_t generation() const;
        /// Waits until the server confirmed the subscription, or `deadline`.
        void wait_subscribed(steady::time_point deadline, const std::stop_token& cancel) const;
        /// Sleeps until a message newer than `seen` arrived (wake_mode::one: until this waiter is
        /// handed a message's wake-up), the connection was re-established or the channel's
        /// SUBSCRIBE confirmed since `seen` was read, or `deadline`.
        /// Calling it again means the attempt after the last wake-up did not get the lock.
        void wait(std::uint64_t seen, steady::time_point deadline,
                  const std::stop_token& cancel) const;
        /// The waiter got the lock: a wake-up it holds is used up, not passed on.
        void granted() noexcept { woken_ = false; }
        /// The payload of the channel's latest message (keyed: of the latest message for this
        /// key), empty before the first.
        std::string last_message() const;
        /// Whether the channel has been subscribed, without a break, since this registration was
        /// made: then every message published after that was delivered here unless the
        /// connection failed (which bumps the generation).
        bool subscribed_throughout() const;
        /// Whether the server confirmed the channel's subscription and it still holds.
        bool subscribed() const;

        /// While it lives, the background thread reads the connection for a thread that waits
        /// on this registration's signal instead of in wait().
        class reading {
        public:
            explicit reading(const registration& r);
            ~reading();
            reading(const reading&) = delete;
            reading& operator=(const reading&) = delete;

        private:
            subscriber& owner_;
        };

    private:
        std::uint64_t generation_locked() const DLOCK_REQUIRES(owner_.mutex_);

        subscriber& owner_;
        std::string channel_;
        std::string key_;
        wake_mode mode_;
        signal* also_;
        std::uint64_t epoch_ = 0;     // the channel's subscription epoch when registered, 0: none
        mutable bool woken_ = false;  // holds a wake-up (wake_mode::one) not yet used
    };

    /// Lends every one of `subs`' connections to the calling thread, or none (the file comment),
    /// and reads them all, dispatching what arrives, until `done()` (called without any lock, after
    /// each read), `deadline` or a stop request on `cancel`: true then. false at once when one
    /// could not be lent, or later when one is wanted back or failed: the caller waits another
    /// way for what is left of its wait.
    static bool read_lent(std::span<subscriber* const> subs, steady::time_point deadline,
                          const std::stop_token& cancel, const std::function<bool()>& done);

    /// Whether the connection is lent to a waiter now (see the file comment).
    bool lent() const;
    /// How many waiters sleep on a condition variable now (someone else reads for them).
    int sleepers() const;

    /// Whether `channel` is subscribed now (confirmed by the server), e.g. still lingering after
    /// its last waiter left.
    bool subscribed(const std::string& channel) const;

    // --- background thread side ---
    /// Sends pending (UN)SUBSCRIBEs, reconnecting first if needed (with backoff), blocking no later
    /// than `latest`. Returns the descriptor to poll for messages, or -1 when idle, disconnected,
    /// lent to a waiter, or when nobody needs it read now (no waiter asleep on a condition
    /// variable, no SUBSCRIBE to confirm).
    int service(steady::time_point now, steady::time_point latest);
    /// poll(2) events to wait for on service()'s descriptor: what the connection's transport
    /// wants (a TLS stream may need POLLOUT to go on reading).
    short wanted_events() const noexcept;
    /// Reads and dispatches every message already available.
    void on_readable();
    /// When service() wants to be called again at the latest (reconnect backoff while someone
    /// waits, a lingering subscription to drop); time_point::max() when there is nothing to do.
    /// Never in the past for longer than one call of service(): the loop sleeps when idle.
    steady::time_point next_retry() const;
    /// Wakes every waiter (shutdown).
    void wake_all();

    subscriber(const subscriber&) = delete;
    subscriber& operator=(const subscriber&) = delete;
    ~subscriber();

private:
    struct channel_state {
        int waiters = 0;
        int waking_all = 0;  // waiters with wake_mode::all
        std::uint64_t generation = 0;
        std::uint64_t wakeups = 0;        // wake_mode::one: messages not yet handed to a waiter
        bool subscribed = false;          // confirmed by the server
        bool requested = false;           // SUBSCRIBE sent, not yet confirmed
        steady::time_point idle_since{};  // when the last waiter left
        std::string last_message;
        /// Bumped whenever `subscribed` changes; 0 is never a subscribed epoch.
        std::uint64_t epoch = 0;
        struct keyed_waiter {
            int registrations = 0;
            std::uint64_t messages = 0;  // its generation, added to the channel's
            std::string last_message;
        };
        std::unordered_map<std::string, keyed_waiter> keyed;  // hand-off channels, by token
        /// The signals of its registrations that have one, with their keys.
        std::vector<std::pair<std::string, signal*>> signals;
        /// Something that ends a wait() changed (a message for `key`'s waiter; nullptr: for
        /// every waiter): wakes the waiters asleep in wait() and raises the signals of `key`'s
        /// registrations (nullptr: of every registration).
        void wake(const std::string* key) {
            changed.notify_all();
            for (const auto& [k, s] : signals)
                if (!key || k == *key) s->raise();
        }
        std::set<std::uint64_t> in_wait;  // tickets of its waiters in wait(), oldest first
        std::uint64_t reading = 0;        // the ticket of its waiter that reads the connection
        /// Whether its waiter that reads the connection has waited longest of those in wait().
        bool reader_is_longest() const { return reading != 0 && *in_wait.begin() == reading; }
        std::condition_variable changed;    // wait() sleeps on it
        std::condition_variable confirmed;  // wait_subscribed() sleeps on it
    };
    /// Makes the channel's sleeping waiters re-check their predicate (a cancel was requested).
    void interrupt(const std::string& channel);
    /// Wakes every waiter of every channel (generation bumped by the caller).
    void notify_everyone_locked() DLOCK_REQUIRES(mutex_);
    steady::time_point next_linger_expiry_locked() const DLOCK_REQUIRES(mutex_);
    void dispatch(const reply& r);
    /// The body of service(), run while the background thread uses the connection.
    int service_connection(steady::time_point now, steady::time_point latest);
    /// Sleeps on `cv` until `ready()` or `deadline`, making sure someone reads meanwhile. `lock`
    /// holds mutex_ (on entry and on return; the analysis cannot follow a lock passed in).
    template <class Pred>
    void sleep(std::condition_variable& cv, dlock::detail::unique_lock& lock,
               steady::time_point deadline, Pred ready) DLOCK_NO_THREAD_SAFETY_ANALYSIS;
    /// Reads and dispatches every message already available (the caller uses the connection).
    void read_available();
    /// One poll(2) of the lent connections of `subs` and their kick eventfds, until something
    /// is readable or `deadline`, then reads what arrived (the caller has them lent, no lock held).
    /// `fds` is the caller's, kept across its polls (no allocation per wake-up).
    static void poll_lent(std::span<subscriber* const> subs, steady::time_point deadline,
                          std::vector<pollfd>& fds);
    /// Whether a waiter that has it lent may go on reading it (not wanted back, still open).
    bool keeps_lent_locked() const DLOCK_REQUIRES(mutex_);
    /// Lends the connection to the calling waiter when nobody uses it and nothing is pending.
    bool lend_locked() DLOCK_REQUIRES(mutex_);
    /// Takes the connection back from the waiter that read; true when the background thread
    /// must be woken to read for others or to do pending work.
    bool give_back_locked() DLOCK_REQUIRES(mutex_);
    /// Wakes the waiter reading the connection (it re-checks what it waits for and whether it
    /// must give the connection back).
    void kick_reader() const noexcept;
    void reset_connection();
    /// Closes the connection; with several servers the next attempt goes to the next one.
    void move_to_next_server();
    /// Doubles the reconnect delay (within [min, max]) and schedules the next attempt.
    void back_off_locked() DLOCK_REQUIRES(mutex_);

    const std::vector<std::shared_ptr<node>> servers_;
    std::function<void(steady::time_point)> wake_;
    std::size_t server_ = 0;            // background thread only
    std::unique_ptr<connection> conn_;  // background thread only

    mutable dlock::detail::mutex mutex_;
    std::unordered_map<std::string, channel_state> channels_ DLOCK_GUARDED_BY(mutex_);
    bool dirty_ DLOCK_GUARDED_BY(mutex_) = false;  // channels_ changed since the last service()
    steady::time_point reconnect_at_ DLOCK_GUARDED_BY(mutex_){};
    // The connection lent to a waiting thread (see the file comment). The background thread uses
    // conn_ and server_ only while nobody has them lent, and the reader only while it has: the
    // hand-over is made under mutex_.
    dlock::detail::event_fd kick_fd_;  // wakes the reader's poll
    short events_ = POLLIN;  // what service()'s descriptor is polled for (background thread only)
    bool lent_ DLOCK_GUARDED_BY(mutex_) = false;              // a waiter reads the connection
    bool preempt_ DLOCK_GUARDED_BY(mutex_) = false;           // the background thread wants it back
    bool background_io_ DLOCK_GUARDED_BY(mutex_) = false;     // in service() / on_readable()
    bool background_polls_ DLOCK_GUARDED_BY(mutex_) = false;  // its poll includes the connection
    int sleepers_ DLOCK_GUARDED_BY(mutex_) = 0;  // waiters asleep on a condition variable
    std::uint64_t wait_tickets_ DLOCK_GUARDED_BY(mutex_) = 0;     // the last wait() ticket given
    const node* lent_node_ DLOCK_GUARDED_BY(mutex_) = nullptr;    // the node it was lent on
    std::uint64_t lent_generation_ DLOCK_GUARDED_BY(mutex_) = 0;  // that node's generation then
    std::chrono::milliseconds backoff_ DLOCK_GUARDED_BY(mutex_){0};
};

}  // namespace dlock::redis::detail
