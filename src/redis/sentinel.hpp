// Redis Sentinel: the URL of a monitored master, and the resolver that finds that master and
// follows its failovers (docs/sentinel.md).
//
//   redis-sentinel://[user[:password]@]s1[:p1],s2[:p2],.../<master-name>[/db][?query]
//   redis+sentinel://...   the same;   rediss-sentinel://...   TLS to the sentinels and the master
//   (rediss://'s verification and tls_* query options, docs/tls.md)
//
// The user-info authenticates to the master; the sentinels get AUTH only with sentinel_password=
// (and sentinel_user=). Query: db, user/username, password, sentinel_user, sentinel_password,
// wait_replicas=K, wait_timeout=DURATION, wait_aof=0|1, failover_wait=DURATION.
//
// The resolver asks the sentinels in turn (SENTINEL get-master-addr-by-name), checks the answer
// with ROLE on the master itself (a sentinel may still name a dead or demoted master during a
// failover: then it asks again), and keeps the verified address. It serves the engine's node as
// its address_source (sentinel_address, node.hpp): the node's connections go to that address, a
// connection error or READONLY reply makes the resolver ask again (suspect), and a change starts
// the node's next generation of connections. The engine's background thread also keeps one
// sentinel subscribed to +switch-master (watch_*), so a failover is followed even while nothing
// fails. Thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/detail/thread_safety.hpp>

#include "core/time.hpp"
#include "redis/node.hpp"
#include "redis/url.hpp"

namespace dlock::redis::detail {

using dlock::detail::steady;

struct sentinel_settings {
    /// The sentinels: host and port, and the sentinels' own AUTH (sentinel_user/_password).
    std::vector<dlock::detail::redis_endpoint> sentinels;
    std::string master_name;
    /// How to talk to the master once found: user, password, db (host and port are found).
    dlock::detail::redis_endpoint master;
    bool tls = false;  ///< rediss-sentinel://
    /// The WAIT safeguard (docs/sentinel.md): replicas that must acknowledge a grant or renewal
    /// within wait_timeout (0: no WAIT), and whether WAITAOF must confirm their fsync too.
    std::uint32_t wait_replicas = 0;
    std::chrono::milliseconds wait_timeout{0};
    bool wait_aof = false;
    /// How long an acquire that meets a failed master keeps asking for a new one (0: unset).
    std::chrono::milliseconds failover_wait{0};
};

/// Whether `url`'s scheme is one of the Sentinel schemes (case-insensitive).
bool is_sentinel_url(std::string_view url) noexcept;

/// Parses a Sentinel URL; on failure sets ec (errc::invalid_argument) with a message naming the
/// problem (the URL redacted).
sentinel_settings parse_sentinel_url(std::string_view url, std::error_code& ec);

class master_resolver {
public:
    master_resolver(sentinel_settings settings, std::chrono::milliseconds connect_timeout,
                    std::chrono::milliseconds command_timeout);
    ~master_resolver();
    master_resolver(const master_resolver&) = delete;
    master_resolver& operator=(const master_resolver&) = delete;

    const sentinel_settings& settings() const noexcept { return settings_; }
    std::chrono::milliseconds connect_timeout() const noexcept { return connect_timeout_; }

    /// The master verified last, if any. Never blocks.
    std::optional<dlock::detail::redis_endpoint> known() const;
    /// A verified master: the known one, or (when none is known or it is suspected) a new
    /// discovery, asking every sentinel in turn and again until `deadline`. At the deadline:
    /// errc::connection_failed naming what each sentinel answered; a sentinel whose connection
    /// timed out is named with the last answer it gave (an earlier round's, or an earlier
    /// discovery's): the deadline cuts the last round's attempts short, and on a loaded machine
    /// "connect timed out" would otherwise hide the cause every full attempt reported.
    dlock::detail::redis_endpoint master(steady::time_point deadline, std::error_code& ec);
    /// A connection to `seen` failed or was answered READONLY: when `seen` is still the known
    /// master, asks the sentinels again (bounded by connect_timeout). True when the known master
    /// is no longer `seen`.
    bool suspect(const dlock::detail::redis_endpoint& seen) noexcept;
    /// `changed` is called (no lock held) after each change of the known master.
    void on_change(std::function<void()> changed);
    /// Why the latest discovery found no master ("" when it found one), for messages.
    std::string last_failure() const;
    /// "master \"<name>\" (sentinels h1:p1,h2:p2)", for messages.
    std::string describe() const;

    // +switch-master, serviced by the engine's background thread only.
    /// (Re)subscribes when due; the descriptor to poll for input, or -1 (none now; see
    /// watch_retry).
    int watch_service(steady::time_point now);
    /// Reads what arrived; a +switch-master for our master discovers the new one at once.
    void watch_readable();
    /// When watch_service should run again without input (a resubscription after a failure).
    steady::time_point watch_retry() const noexcept { return watch_retry_; }

private:
    struct state;
    /// `answers`: what each sentinel last answered (state::answers, under discover_mutex).
    bool discover(steady::time_point deadline, std::string& why, std::vector<std::string>& answers);

    const sentinel_settings settings_;
    const std::chrono::milliseconds connect_timeout_;
    const std::chrono::milliseconds command_timeout_;
    std::unique_ptr<state> state_;
    steady::time_point watch_retry_ = steady::time_point::min();  // background thread only
};

/// The node seam's view of a resolver (node.hpp): current() is the master verified last (the
/// first call, from the node's constructor, asks the sentinels, bounded by connect_timeout);
/// while none is known, a placeholder address that fails at once, so the first use asks again.
class sentinel_address final : public address_source {
public:
    explicit sentinel_address(std::shared_ptr<master_resolver> resolver);
    dlock::detail::redis_endpoint current() const override;
    bool suspect(const dlock::detail::redis_endpoint& seen, std::string_view why) noexcept override;
    void on_change(const std::function<void()>& changed) override;

private:
    std::shared_ptr<master_resolver> resolver_;
    dlock::detail::redis_endpoint placeholder_;
};

}  // namespace dlock::redis::detail
