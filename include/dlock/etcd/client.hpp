// `dlock::etcd::client`: the etcd lock service, wire-compatible with etcd's own lock recipe (the
// Go client's concurrency.Mutex and `etcdctl lock`): a lock named N is the key
// "<prefix>N/<lease id in hex>" under one lease per client, and the holder is the key with the
// smallest create revision under "<prefix>N/". So dlock, `etcdctl lock N` and Go services using
// concurrency.NewMutex(session, "N") exclude each other. Kinds: exclusive and fair (the recipe is
// first-come-first-served); the others are errc::unsupported (docs/etcd.md). The fencing token is
// the key's create revision.
//
// What one client owns: one gRPC channel per endpoint, one etcd lease at a time (its "session",
// kept alive by keep-alive requests), and ONE background thread that keeps the lease alive and
// reports leases uncertain or lost.
//
// Sharing: thread-safe. Create one per process and share it by reference; it must outlive the
// mutexes that use it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/backend.hpp>
#include <dlock/event.hpp>
#include <dlock/options.hpp>

namespace dlock::etcd {

/// The longest lock name accepted, in bytes.
inline constexpr std::size_t max_name_length = 512;

struct client_options {
    /// `etcd://[user:password@]host1:port1,host2:port2,.../prefix` (or `etcds://...` for TLS,
    /// with the query options `tls_ca`, `tls_cert`, `tls_key`, `tls_server_name`,
    /// `tls_insecure`; a user authenticates with etcd's Authenticate, errc::auth_failed when
    /// refused): the members of one cluster (requests go to
    /// one, and to the next when it fails) and the key prefix prepended to every lock name
    /// (default none: lock N uses the keys under "N/", exactly as `etcdctl lock N`). Port
    /// defaults to 2379. IPv6 hosts go in brackets.
    std::string url = "etcd://127.0.0.1:2379";
    /// The TTL of the client's etcd lease, which every lock it holds lives by (etcdctl lock's
    /// --ttl). Whole seconds (etcd's unit), at least 2s: it is rounded up.
    std::chrono::milliseconds session_ttl = std::chrono::seconds(10);
    /// Bound on reaching a member for the first request of a session. Must be > 0.
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(2);
    /// Bound on each request (a Txn, a Range, a keep-alive). Must be > 0.
    std::chrono::milliseconds command_timeout = std::chrono::seconds(2);
    /// Lock events (acquired, released, lost, ...). Silent when unset.
    dlock::observer observer{};
    /// Failures with no caller to throw to (a failed release in a destructor, an exception
    /// escaping a callback). Unset: one line on stderr.
    std::function<void(std::error_code, std::string_view what)> error_handler{};
    /// TLS settings for an `etcds://` URL (docs/etcd.md): the CA file to trust instead of the
    /// system's roots, a client certificate and key (mutual TLS), the name the members'
    /// certificates must carry, or insecure_skip_verify. The URL's tls_* query options take
    /// precedence; ca_dir is not supported (gRPC takes a file); setting any field for an etcd://
    /// URL is errc::invalid_argument. Files are read when the client is constructed.
    dlock::tls_options tls{};
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
    /// Stops the background thread and revokes the client's lease: every lease still alive is
    /// lost, and its key goes with the etcd lease.
    ~client() override;

    /// See dlock::backend::acquire_until. Every kind (docs/etcd.md, "Kinds"): exclusive, fair,
    /// reentrant and write use etcd's lock recipe; read and permits put keys of their own in the
    /// same queue. Grants a lease to the client first if it has none (bounded by
    /// connect_timeout: errc::connection_failed), puts our key in one transaction guarded by
    /// its create revision being 0, and, when it does not hold, waits on a watch of the deletion
    /// of the one key it queues behind (no herd, no polling). A waiter whose etcd lease expired
    /// stops waiting and queues again under a new lease. On any failure our key is deleted
    /// (fenced on its create revision). Two acquires of one name by one client with etcdctl's
    /// key (every kind but read and permits) take turns inside the client (that key is per
    /// lease, so per client). A name with another kind's keys: errc::unexpected_reply.
    [[nodiscard]] lease acquire_until(std::string_view name, const lock_request& request,
                                      const lock_options& options,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::error_code& ec) noexcept override;
    using dlock::backend::acquire;
    using dlock::backend::acquire_until;

    /// See dlock::backend::set_permits: the key "<url prefix>/dlock-permits-<name in hex>" (no
    /// lock's key range contains it), put without a lease; a waiter first in line watches it.
    void set_permits(std::string_view name, std::uint32_t permits,
                     std::error_code& ec) noexcept override;
    using dlock::backend::set_permits;

    /// See dlock::backend::inspect: the keys under the lock's prefix and the permits key, read
    /// in one transaction by the recipe's rules (docs/etcd.md). lease_left stays unset (a
    /// holder's key lives by its client's etcd lease); the fencing counter is the largest create
    /// revision among the holders' keys.
    [[nodiscard]] lock_info inspect(std::string_view name, std::error_code& ec) noexcept override;
    using dlock::backend::inspect;

    /// See dlock::backend::watch: an etcd watch of the lock's key range and its permits key, from
    /// the revision after the last change reported, so nothing between two waits is missed.
    [[nodiscard]] std::unique_ptr<lock_watch> watch(std::string_view name,
                                                    std::error_code& ec) noexcept override;

    /// See dlock::backend::record_once: the key "<url prefix>/dlock-record-<name in hex>" (no
    /// lock's key range contains it), put with the value unless it exists, in one transaction;
    /// it has no lease, so it outlives the client.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept override;

    /// The options this client was made with.
    const client_options& options() const noexcept;

    /// The key prefix under which lock `name`'s queue lives ("<url prefix>name/").
    std::string key_prefix(std::string_view name) const;

    /// The key a lease granted by this client holds ("<key prefix><lease id in hex>", what
    /// `etcdctl lock` calls ETCD_LOCK_KEY; its create revision is the fencing token); empty for
    /// an empty lease or one of another client.
    std::string key_of(const lease& l) const;

    /// How many acquire calls of this client wait inside it for their turn on lock `name`: the
    /// recipe's key is one per etcd lease, so one per client and name, and calls of one client
    /// queue in etcd one at a time, first come, first served (docs/etcd.md).
    std::size_t waiting_here(std::string_view name) const;

private:
    class impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace dlock::etcd
