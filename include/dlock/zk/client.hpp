// `dlock::zk::client`: the ZooKeeper lock service (Apache Curator's InterProcessMutex and
// InterProcessReadWriteLock recipes over Debian's libzookeeper-mt). It implements dlock::backend,
// so dlock::mutex and the rest of the lock family run on it: kinds exclusive, fair (the same
// first-come-first-served recipe), reentrant, read, write and permits. See docs/zookeeper.md for
// the recipe, the fencing token (the node's czxid) and the exact rule for when a lease counts as
// lost.
//
// What one client owns: one ZooKeeper session at a time (the C client's IO and completion
// threads), and ONE background thread that heartbeats the session, fires loss, enforces max_hold
// and deletes orphaned nodes.
//
// Sharing: thread-safe. Create one per process and share it by reference; it must outlive the
// mutexes that use it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/backend.hpp>
#include <dlock/event.hpp>
#include <dlock/options.hpp>

namespace dlock::zk {

/// The longest lock name accepted, in bytes (before encoding into one znode name).
inline constexpr std::size_t max_name_length = 512;

struct client_options {
    /// `zk://host1:port1,host2:port2,.../base`: the servers of one ensemble (the C client fails
    /// over between them) and the base path under which lock nodes live (default `/dlock`,
    /// created on first use). Port defaults to 2181. IPv6 hosts go in brackets.
    std::string url = "zk://127.0.0.1:2181/dlock";
    /// The session timeout to ask for. The server clamps it to [2, 20] x its tickTime; the
    /// granted value governs lease validity (docs/zookeeper.md). Must be > 0.
    std::chrono::milliseconds session_timeout = std::chrono::seconds(10);
    /// Bound on establishing a session (TCP connect plus session handshake). Must be > 0.
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(2);
    /// "user:password" for ZooKeeper's digest authentication; empty = none. With a digest, lock
    /// nodes get CREATOR_ALL_ACL, so only the same identity can use or remove them.
    std::string digest{};
    /// Lock events (acquired, released, lost, ...). Silent when unset.
    dlock::observer observer{};
    /// Failures with no caller to throw to: a failed release in a destructor, an exception
    /// escaping a callback; and a semaphore acquired with another number of permits than the
    /// node records (errc::invalid_argument, both numbers; the acquire goes on with the recorded
    /// one). Unset: one line on stderr.
    std::function<void(std::error_code, std::string_view what)> error_handler{};
};

class client final : public dlock::backend {
public:
    /// Validates the options and parses the URL (errc::invalid_argument naming the field);
    /// connects lazily, on first use.
    explicit client(client_options options);
    client(client&&) noexcept;
    client& operator=(client&&) noexcept;
    client(const client&) = delete;
    client& operator=(const client&) = delete;
    /// Stops the background thread and closes the session: every lease still alive is lost and
    /// its node goes with the session.
    ~client() override;

    /// See dlock::backend::acquire_until. Connects first if needed (bounded by connect_timeout:
    /// errc::connection_failed). Waits on a watch of the one node ahead of ours (no polling). A
    /// request in flight when the deadline passes finishes first (bounded by the C client's 2/3
    /// session timeout); while disconnected it waits at most until the session can no longer be
    /// trusted, then tries a new session. On any failure our queue node is deleted (or, if
    /// unreachable, deleted once reconnected or with the session). Names may contain any byte:
    /// each is encoded into one znode name (docs/zookeeper.md).
    [[nodiscard]] lease acquire_until(std::string_view name, const lock_request& request,
                                      const lock_options& options,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::error_code& ec) noexcept override;
    using dlock::backend::acquire;
    using dlock::backend::acquire_until;

    /// See dlock::backend::set_permits: the number is the data of the semaphore's (persistent)
    /// znode; a waiter first in line is woken by the change.
    void set_permits(std::string_view name, std::uint32_t permits,
                     std::error_code& ec) noexcept override;
    using dlock::backend::set_permits;

    /// See dlock::backend::inspect: the lock node's children, read by the recipe's rules
    /// (docs/zookeeper.md). A holder's lease is its session, so lease_left stays unset; the
    /// fencing counter is the largest czxid among the holders' nodes.
    [[nodiscard]] lock_info inspect(std::string_view name, std::error_code& ec) noexcept override;
    using dlock::backend::inspect;

    /// See dlock::backend::record_once: a persistent node "<lock_path(name)>%record" whose data is
    /// the value; ZooKeeper's create is atomic, so one first user creates it and every other
    /// reads it.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept override;

    /// See dlock::backend::watch: an exists and a child watch on the lock node, set again on
    /// each wait; the node's version and child version tell a change made between two waits.
    [[nodiscard]] std::unique_ptr<lock_watch> watch(std::string_view name,
                                                    std::error_code& ec) noexcept override;

    /// The options this client was made with.
    const client_options& options() const noexcept;

    /// The znode under which lock `name`'s queue lives (for inspection tools and tests).
    std::string lock_path(std::string_view name) const;

private:
    class impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace dlock::zk
