// How one Redis server is reached: a `node` owns the connection settings of one server, its pool
// of command connections and its renewal connection. Which server that is can change at run time
// (a Sentinel failover moves the master; later, a Cluster slot moves): the node asks its
// `address_source` where to connect, and a new address starts a new generation of settings.
// "Who votes" is not here: the engine (engine.hpp) holds a quorum over nodes (one node for the
// single-instance client, N for Redlock), counts their votes and checks their identities.
//
// Settings are immutable snapshots (std::shared_ptr<const connection_settings>), one per role and
// generation; a connection holds the snapshot it was made from, so a change never leaves a
// connection with a dangling reference. A connection of an older generation is closed instead of
// reused: the pool drops it when it is lent or returned, the renewal connection is replaced
// before its next use, and the subscriber and a watch reconnect to the current address at their
// next (re)connect (subscriber.cpp, watch.cpp).
//
// Plugging in a resolved node (Sentinel; later Cluster): implement `address_source`:
//   - current(): the address to use now (cheap, never blocks: return what was resolved last);
//   - suspect(seen, why): called by node::suspect() when a connection to `seen` failed or a
//     server answered READONLY; return true when current() changed (the node then starts a new
//     generation at once). It runs on the caller's thread, so it must bound any I/O it does (or
//     hand it to a thread of its own and call the `changed` callback later);
//   - on_change(changed): the node's callback for a source that learns of a move by itself (a
//     +switch-master message): call it whenever current() changed; the node re-reads current().
// Who calls node::suspect(): the engine's fan-out (engine::run_on_every_server), for every node
// whose batch failed or carried a READONLY reply, after acquire, release, renewal, inspect and
// record rounds alike. engine_config::address_source_for makes the source of each configured
// server; unset, every node has a fixed_address (today's behaviour).
//
// A node is shared by the engine, its subscriber and its watches (std::shared_ptr); its methods
// are thread-safe except renewal_connection() (the engine's background thread only).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/detail/thread_safety.hpp>

#include "redis/connection.hpp"

namespace dlock::redis::detail {

/// Where a node connects to (see the file comment).
class address_source {
public:
    virtual ~address_source() = default;
    /// The address connections go to now. Never blocks.
    virtual dlock::detail::redis_endpoint current() const = 0;
    /// A connection to `seen` failed, or `seen` answered READONLY (`why` says which): true when
    /// current() changed meanwhile. The default (a fixed address) never changes.
    virtual bool suspect(const dlock::detail::redis_endpoint& seen, std::string_view why) noexcept;
    /// Called once by the node it serves; a source that learns of a move by itself calls
    /// `changed` then (from any thread, with no lock of its own held). Default: never.
    virtual void on_change(const std::function<void()>& changed);
};

/// Today's node: one configured address, for good.
class fixed_address final : public address_source {
public:
    explicit fixed_address(dlock::detail::redis_endpoint endpoint)
        : endpoint_(std::move(endpoint)) {}
    dlock::detail::redis_endpoint current() const override { return endpoint_; }

private:
    const dlock::detail::redis_endpoint endpoint_;
};

class node {
public:
    /// What a connection is for: its CLIENT SETNAME (dlock:cmd, dlock:renew, dlock:sub,
    /// dlock:watch), so CLIENT LIST shows who is who.
    enum class role { commands, renewals, subscriber, watch };
    static constexpr std::size_t roles = 4;

    /// Command connections per node (acquire, release, command()): however many threads wait or
    /// lock, a client opens at most this many, plus its renewal and subscriber connections.
    static constexpr std::size_t max_pooled = 16;

    node(std::unique_ptr<address_source> source, std::chrono::milliseconds connect_timeout,
         std::chrono::milliseconds command_timeout);
    node(const node&) = delete;
    node& operator=(const node&) = delete;

    /// The settings a new connection for `r` uses now.
    std::shared_ptr<const connection_settings> settings(role r) const;
    /// A new (not yet connected) connection for `r` to the current address.
    std::unique_ptr<connection> connect(role r) const;
    /// Whether `c` was made from this generation's settings (false: the node moved since).
    bool current(const connection& c) const;
    /// Counts address changes; 0 until the first.
    std::uint64_t generation() const;
    /// The current address, for messages (never a password).
    std::string describe() const;

    /// Re-reads the source's address; a different one starts a new generation and calls the
    /// moved callback. Thread-safe.
    void refresh();
    /// See the file comment: a failure or READONLY seen on a connection to this node.
    void suspect(const connection& seen, std::string_view why) noexcept;
    /// Called (with no lock held) after each move: the engine wakes its background thread, so
    /// the subscriber reconnects to the new address without waiting for a failure.
    void on_moved(std::function<void()> moved);

    /// The renewal connection (background thread only; before that, the engine's constructor),
    /// replaced by one to the current address first if the node moved.
    connection& renewal_connection();

    /// A pooled command connection of a node, returned to its pool when it goes out of scope. A
    /// node has at most max_pooled command connections; a caller beyond that waits for one to
    /// come back, first come first served, until `deadline` (then get() is null). A connection
    /// is lent for one exchange, so the wait is bounded by the exchanges queued ahead. One of an
    /// older generation is closed (and replaced) instead of being lent or pooled again.
    class pooled {
    public:
        explicit pooled(node& n, steady::time_point deadline = steady::time_point::max());
        ~pooled();
        pooled(pooled&&) noexcept = default;
        pooled& operator=(pooled&&) = delete;
        connection* get() const noexcept { return conn_.get(); }
        explicit operator bool() const noexcept { return conn_ != nullptr; }

    private:
        node* node_;
        std::unique_ptr<connection> conn_;
    };

private:
    struct generation_settings {
        std::uint64_t number = 0;
        dlock::detail::redis_endpoint endpoint;
        std::shared_ptr<const connection_settings> by_role[roles];
    };
    std::shared_ptr<const generation_settings> make_generation(
        std::uint64_t number, dlock::detail::redis_endpoint endpoint) const;
    std::shared_ptr<const generation_settings> snapshot() const;

    const std::unique_ptr<address_source> source_;
    const std::chrono::milliseconds connect_timeout_;
    const std::chrono::milliseconds command_timeout_;

    mutable dlock::detail::mutex settings_mutex_;
    std::shared_ptr<const generation_settings> now_ DLOCK_GUARDED_BY(settings_mutex_);
    std::function<void()> moved_ DLOCK_GUARDED_BY(settings_mutex_);

    /// A caller waiting for a command connection; the returning one hands it over directly.
    struct slot_waiter {
        std::condition_variable ready;
        std::unique_ptr<connection> conn;
    };
    dlock::detail::mutex pool_mutex_;  // also guards slot_waiter::conn of the queued waiters
    std::vector<std::unique_ptr<connection>> idle_ DLOCK_GUARDED_BY(pool_mutex_);
    std::size_t created_ DLOCK_GUARDED_BY(pool_mutex_) = 0;  // command connections (<= max_pooled)
    std::deque<slot_waiter*> queue_ DLOCK_GUARDED_BY(pool_mutex_);  // first come first served
    std::unique_ptr<connection> renew_conn_;                        // background thread only
};

}  // namespace dlock::redis::detail
