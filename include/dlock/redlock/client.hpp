// `dlock::redlock::client`: one lock over N independent Redis masters (the Redlock algorithm),
// held while a majority (N/2+1) of them agrees. Requests go to all servers at once, so acquiring
// costs about one round trip whatever N is, and a dead or slow server costs only its own
// node_timeout. Fencing tokens stay monotonic across the independent servers (docs/redlock.md).
// It implements dlock::backend, so dlock::mutex runs on it exactly as on one server.
//
// Sharing: thread-safe; one client per process, shared by reference. One background thread
// renews every held lease on all servers; one subscriber connection per server serves every
// waiter (each server hands its key to its own first waiter and tells it: docs/redlock.md).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/event.hpp>
#include <dlock/options.hpp>

namespace dlock::redis {
class client;
}

namespace dlock::redlock {

struct client_options {
    /// One `redis://[user[:password]@]host[:port][/db]` (or unix://) URL per independent master.
    /// Typically 3 or 5; the quorum is N/2+1. 1 or 2 URLs are accepted, but then every server
    /// is needed for a grant: no fault tolerance (docs/redlock.md).
    std::vector<std::string> urls{};
    /// Bound on establishing a connection to one server.
    std::chrono::milliseconds connect_timeout = 1s;
    /// Bound on one release or renewal round trip to one server.
    std::chrono::milliseconds command_timeout = 1s;
    /// Bound on one acquire attempt at one server. Unset: lease/200 clamped to [5ms, 50ms] (50 ms
    /// for a 10 s lease). Keep it far below the lease: the time it takes is subtracted from
    /// validity.
    std::optional<std::chrono::milliseconds> node_timeout{};
    /// Validity = lease - elapsed - (drift_ratio x lease + drift_floor): the margin for clock-rate
    /// differences between this client and the servers, and for expiry granularity.
    double drift_ratio = 0.01;
    std::chrono::milliseconds drift_floor = 2ms;
    /// Key prefix, as in dlock::redis::client_options (hash-tagged keys).
    std::string key_prefix = "dlock";
    dlock::observer observer{};
    std::function<void(std::error_code, std::string_view what)> error_handler{};
    /// As in dlock::redis::client_options: how long a name's fence counters (on every server)
    /// outlive its last grant; the servers' clocks may differ (and step back) by less than this
    /// (docs/redlock.md, "Fencing tokens across independent counters").
    std::chrono::milliseconds idle_expiry = std::chrono::hours(24);
    /// TLS settings for every rediss:// server in `urls` (docs/tls.md).
    dlock::tls_options tls{};
};

class client final : public dlock::backend {
public:
    /// Validates the options and every URL (errc::invalid_argument naming it, errc::unsupported
    /// for rediss://); connects lazily.
    explicit client(client_options options);
    /// The servers (URL, timeouts, key prefix) of existing single-server clients; those clients
    /// are not used afterwards and need not outlive this one.
    explicit client(const std::vector<std::reference_wrapper<const dlock::redis::client>>& servers);
    client(client&&) noexcept;
    client& operator=(client&&) noexcept;
    client(const client&) = delete;
    client& operator=(const client&) = delete;
    ~client() override;

    /// See dlock::backend::acquire_until and docs/redlock.md. Contention ends in errc::timeout /
    /// attempts_exhausted; fewer than a quorum of servers answering is errc::quorum_unreachable,
    /// whose message names each failed server.
    [[nodiscard]] lease acquire_until(std::string_view name, const lock_request& request,
                                      const lock_options& options,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::error_code& ec) noexcept override;
    using dlock::backend::acquire;
    using dlock::backend::acquire_until;

    /// See dlock::backend::inspect: the read-only script runs on every server at once; the answer
    /// is the quorum view, with each server's own view in lock_info::servers.
    [[nodiscard]] lock_info inspect(std::string_view name, std::error_code& ec) noexcept override;
    using dlock::backend::inspect;

    /// See dlock::backend::record_once: the Redis client's script (SET if absent, then read) on
    /// every server at once. The recorded value is the one a majority of all servers stores, and
    /// once stored on a majority it is the only one any later call can return. errc::
    /// quorum_unreachable when fewer than a quorum answer; errc::invalid_argument when enough
    /// answer but no value is on a majority (first writers raced with different values), naming
    /// what each server stores.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept override;

    /// See dlock::backend::watch: a connection per server with CLIENT TRACKING BCAST on the
    /// name's keys (Redis 6+); the release channel on a server that refuses it.
    [[nodiscard]] std::unique_ptr<lock_watch> watch(std::string_view name,
                                                    std::error_code& ec) noexcept override;

    /// Number of servers and the quorum (N/2+1).
    std::size_t size() const noexcept;
    std::size_t quorum() const noexcept;

private:
    class impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace dlock::redlock
