// `dlock::redis::client`: the single-instance Redis lock service (SET NX PX + Lua release, the
// redis.io "distlock" pattern) and a small command interface to the same server. It implements
// dlock::backend, so dlock::mutex and the rest of the lock family run on it.
//
// What one client owns: a pool of command connections (one per concurrently running call, reused),
// one subscriber connection shared by every waiting lock (release notifications), and ONE
// background thread that renews every held lease in pipelined batches and watches for loss.
//
// Sharing: thread-safe. Create one per process and share it by reference; every member may be
// called from any thread at once. It must outlive the mutexes that use it; leases keep what they
// need alive, but once the client is destroyed they are no longer renewed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/event.hpp>
#include <dlock/options.hpp>
#include <dlock/redis/reply.hpp>

namespace dlock::redis {

/// The longest lock name accepted, in bytes (Redis keys may be larger, but a lock name that long
/// is a bug in the caller).
inline constexpr std::size_t max_name_length = 1024;

struct client_options {
    /// `redis://[user[:password]@]host[:port][/db]` or `unix://[user[:password]@]/path/to/socket`,
    /// either with an optional query `?db=N&user=NAME&password=SECRET` (redis-py's spelling;
    /// `username=` too). A user is an ACL user (AUTH user password). Schemes are
    /// case-insensitive. Percent-escapes are decoded in user, password and socket path. Any other
    /// query option is errc::invalid_argument. `rediss://` is Redis over TLS (docs/tls.md), which
    /// also takes `tls_ca=`, `tls_ca_dir=`, `tls_cert=`, `tls_key=`, `tls_server_name=` and
    /// `tls_insecure=1` (see `tls`). The ACL rights dlock needs: docs/cli.md, "Redis ACL".
    /// Or a Sentinel URL, `redis-sentinel://[user[:password]@]s1[:p1],s2[:p2]/master[/db]`
    /// (`redis+sentinel://` too; `rediss-sentinel://` over TLS, with `tls` and the `tls_*` query
    /// options): the master is found through the sentinels and followed across failovers
    /// (docs/sentinel.md).
    std::string url = "redis://127.0.0.1:6379";
    /// Bound on establishing a connection (TCP connect plus AUTH and SELECT).
    std::chrono::milliseconds connect_timeout = 1s;
    /// Bound on one command's round trip. Keep it well below your leases.
    std::chrono::milliseconds command_timeout = 1s;
    /// Every key is `<key_prefix>:{<name>}...`: the hash tag keeps one lock's keys in one Redis
    /// Cluster slot. Must not be empty or contain '{' or '}'.
    std::string key_prefix = "dlock";
    /// Lock events (acquired, renewed, released, lost, ...). Silent when unset.
    dlock::observer observer{};
    /// Failures with no caller to throw to: a failed unlock() or destructor release, a renewal
    /// error, an exception escaping a callback; and a semaphore acquired with another number of
    /// permits than the server records (errc::invalid_argument, both numbers; the acquire goes
    /// on with the recorded one). Unset: one line on stderr.
    std::function<void(std::error_code, std::string_view what)> error_handler{};
    /// How long a lock name's server state outlives the name's last grant: its fence counter
    /// (and a semaphore's number of permits) expire this long after the last grant (or the last
    /// holder), so names used once do not stay in Redis for ever. Fencing tokens still rise
    /// across that expiry: a new counter starts at the server's clock in microseconds, so this is
    /// also how far the server's clock may step back across an expiry (docs/redis-lock.md,
    /// "Fencing tokens and key expiry"). Must be > 0; every client of a name should use the same.
    std::chrono::milliseconds idle_expiry = std::chrono::hours(24);
    /// TLS settings for a rediss:// URL (CA, client certificate, server name); docs/tls.md.
    dlock::tls_options tls{};
    /// The WAIT safeguard (docs/sentinel.md): when > 0, a grant counts only once this many
    /// replicas acknowledged it (WAIT wait_replicas wait_timeout, on the connection that wrote
    /// it); otherwise it is released and acquire fails with errc::quorum_unreachable naming the
    /// number required and the number that acknowledged. A renewal they do not acknowledge does
    /// not extend the lease (the lease turns uncertain). The URL's `?wait_replicas=` wins.
    std::uint32_t wait_replicas = 0;
    /// How long the server waits for those replicas (must be > 0 with wait_replicas).
    std::chrono::milliseconds wait_timeout = std::chrono::milliseconds(0);
    /// With wait_replicas: also WAITAOF 0 wait_replicas wait_timeout (the replicas' fsync;
    /// Redis 7.2+). A server without WAITAOF fails every grant, saying so.
    bool wait_aof = false;
    /// Sentinel URLs: how long an acquire that meets a failed master keeps asking the sentinels
    /// for a new one (bounded by its own deadline too). The URL's `?failover_wait=` wins.
    std::chrono::milliseconds failover_wait = std::chrono::seconds(60);
};

/// `url` with any password, and every query value but db/user/username/tls_*, replaced by "***",
/// for logs and messages (error messages of this library already redact URLs); dlock::redact_url.
std::string redact_url(std::string_view url);

class client final : public dlock::backend {
public:
    /// Validates the options and parses the URL (errc::invalid_argument / errc::unsupported);
    /// connects lazily, on first use.
    explicit client(client_options options);
    client(client&&) noexcept;
    /// Move-assigning stops this client's background thread first (see ~client).
    client& operator=(client&&) noexcept;
    client(const client&) = delete;
    client& operator=(const client&) = delete;
    /// Stops the background thread and closes every connection. Leases still alive stop being
    /// renewed; their release still works.
    ~client() override;

    /// See dlock::backend::acquire_until. One round trip when the lock is free: a script does
    /// SET NX PX and increments the lock's fence counter atomically.
    [[nodiscard]] lease acquire_until(std::string_view name, const lock_request& request,
                                      const lock_options& options,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::error_code& ec) noexcept override;
    using dlock::backend::acquire;
    using dlock::backend::acquire_until;

    /// See dlock::backend::inspect: one read-only script reads every key of the name, whichever
    /// kind uses it.
    [[nodiscard]] lock_info inspect(std::string_view name, std::error_code& ec) noexcept override;
    using dlock::backend::inspect;

    /// See dlock::backend::watch: a connection per server with CLIENT TRACKING BCAST on the
    /// name's keys (Redis 6+); the release channel on a server that refuses it.
    [[nodiscard]] std::unique_ptr<lock_watch> watch(std::string_view name,
                                                    std::error_code& ec) noexcept override;

    /// See dlock::backend::set_permits: one script SETs the semaphore's number of permits and
    /// wakes its waiters, so they re-check at once when permits were added.
    void set_permits(std::string_view name, std::uint32_t permits,
                     std::error_code& ec) noexcept override;
    using dlock::backend::set_permits;

    /// See dlock::backend::record_once: one script reads the key "<prefix>:{<name>}:record" and
    /// sets it (no expiry) when absent.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept override;

    /// Runs one Redis command on a pooled connection (e.g. {"INCRBY", "stock", "-1"}), bounded by
    /// command_timeout. An error reply is returned as reply::kind::error, not thrown; transport
    /// failures throw dlock::error.
    reply command(const std::vector<std::string>& args);
    reply command(const std::vector<std::string>& args, std::error_code& ec) noexcept;

    /// Round trip to the server (PING); throws on failure. Useful as a readiness check.
    void ping();

    /// The options this client was made with (e.g. to build a dlock::redlock::client from clients).
    const client_options& options() const noexcept;

    /// The server-side key names used for lock `name` (for inspection tools and tests).
    std::string lock_key(std::string_view name) const;
    std::string fence_key(std::string_view name) const;
    std::string release_channel(std::string_view name) const;

private:
    class impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace dlock::redis
