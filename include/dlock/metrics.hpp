// `dlock::metrics`: per-lock-family metrics fed by the observer events (event.hpp), with no
// dependency beyond the standard library. Any program can snapshot() it and render the snapshot
// as OpenMetrics text (what Prometheus scrapes); <dlock/prometheus.hpp> registers the same
// metrics with a prometheus-cpp registry instead. docs/metrics.md lists every metric.
//
//   dlock::metrics stats;                        // outlives the clients that feed it
//   dlock::redis::client redis("redis://127.0.0.1", {.observer = stats.observer()});
//   ...
//   std::string text = dlock::render_openmetrics(stats.snapshot());
//
// Labels: a lock's name never becomes a label (one series per SKU would swamp any metrics server).
// A family mapper turns a name into a bounded family label such as "stock/*"; at most
// metrics_options::max_families distinct families are kept, later ones count as "~other".
//
// Sharing: every member is thread-safe. record() (what the observer calls) costs one call of the
// mapper, a shared lock on the family table and one uncontended per-family mutex.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/event.hpp>
#include <dlock/lease.hpp>

namespace dlock {

/// Maps a lock name to its family label. Must return a small, bounded set of values for all the
/// names a program uses, and be thread-safe.
using family_mapper = std::function<std::string(std::string_view name)>;

/// The default mapper: the name's first segment, up to and including the first '/' or ':', then
/// '*' ("stock/sku-42" -> "stock/*", "orders:eu:7" -> "orders:*", "a/b/c" -> "a/*"); a name
/// without either separator maps to "*".
std::string default_family(std::string_view name);

/// How an acquire call ended (the `outcome` label).
enum class acquire_outcome : std::uint8_t {
    granted,
    timeout,             ///< errc::timeout: held by someone else until the wait bound
    attempts_exhausted,  ///< errc::attempts_exhausted
    canceled,            ///< errc::canceled
    error,               ///< anything else: a backend failure or a bad argument
};
inline constexpr std::size_t acquire_outcome_count = 5;
const char* to_string(acquire_outcome outcome) noexcept;
/// The outcome a gave_up event's error code stands for.
acquire_outcome outcome_of(std::error_code ec) noexcept;

/// The loss reasons counted (the `reason` label): every lost_reason but none and released.
inline constexpr std::array<lost_reason, 6> loss_reasons{
    lost_reason::expired, lost_reason::max_hold,        lost_reason::taken_over,
    lost_reason::deleted, lost_reason::session_expired, lost_reason::client_closed};

struct metrics_options {
    family_mapper family = default_family;
    /// Upper bounds (seconds, strictly increasing, finite) of the wait-time histogram's buckets;
    /// +Inf is implied.
    std::vector<double> wait_buckets{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60};
    /// Upper bounds (seconds) of the hold-time histogram's buckets.
    std::vector<double> hold_buckets{0.01, 0.1, 1, 10, 60, 600, 3600};
    /// Distinct families kept; events of further families are counted under "~other".
    std::size_t max_families = 256;
};

struct histogram_snapshot {
    std::vector<double> bounds;          ///< the finite upper bounds
    std::vector<std::uint64_t> buckets;  ///< cumulative counts, one per bound, then +Inf
    double sum = 0;                      ///< seconds
    std::uint64_t count = 0;             ///< == buckets.back()
};

/// One family's numbers at one instant (consistent within the family).
struct family_snapshot {
    std::string family;
    std::array<std::uint64_t, acquire_outcome_count> acquires{};  ///< by acquire_outcome
    histogram_snapshot wait;  ///< from the acquire call to the grant (granted calls only)
    histogram_snapshot hold;  ///< from the grant's request to its release or loss
    std::uint64_t releases = 0;
    std::uint64_t renewals_ok = 0;
    std::uint64_t renewals_failed = 0;  ///< episodes (held -> uncertain), see event_kind
    std::array<std::uint64_t, loss_reasons.size()> losses{};  ///< in loss_reasons order
    std::uint64_t handoffs = 0;
    std::uint64_t errors =
        0;  ///< error events (backend failures while acquiring/renewing/releasing)
    std::int64_t holders = 0;  ///< grants held now
    std::int64_t waiters = 0;  ///< acquire calls waiting now

    std::uint64_t acquires_by(acquire_outcome o) const noexcept {
        return acquires[static_cast<std::size_t>(o)];
    }
    /// Losses for `reason` (0 for none / released).
    std::uint64_t losses_by(lost_reason reason) const noexcept;
};

/// One Redlock server's failed votes (node_failed events), whatever the lock.
struct node_snapshot {
    std::string server;  ///< as the event names it ("host:port")
    std::uint64_t failures = 0;
};

struct metrics_snapshot {
    std::vector<family_snapshot> families;  ///< sorted by family label
    /// Servers that failed a vote at least once, sorted by server (at most
    /// metrics_options::max_families of them; later ones count as "~other").
    std::vector<node_snapshot> nodes{};
    /// The server's failures (0 when it never failed).
    std::uint64_t node_failures(std::string_view server) const noexcept;
    /// The family's snapshot, or nullptr if it has seen no event.
    const family_snapshot* find(std::string_view family) const noexcept;
};

class metrics {
public:
    /// Throws dlock::error(errc::invalid_argument) if a bucket list is not strictly increasing
    /// and finite, max_families is 0 or the mapper is empty.
    explicit metrics(metrics_options options = {});
    ~metrics();
    metrics(const metrics&) = delete;
    metrics& operator=(const metrics&) = delete;

    /// An observer for client_options::observer. It refers to *this: keep this object alive as
    /// long as any client uses it. Chain it with your own observer by calling record().
    dlock::observer observer();

    /// Counts one event. Never throws (an out-of-memory mapper call drops the event).
    void record(const lock_event& event) noexcept;

    metrics_snapshot snapshot() const;

    /// render_openmetrics(snapshot()).
    std::string render() const;

private:
    struct state;
    std::unique_ptr<state> state_;
};

/// The snapshot as OpenMetrics 1.0 text (Content-Type:
/// application/openmetrics-text; version=1.0.0; charset=utf-8), ending with "# EOF". Prometheus
/// scrapes it as is. Metric names start with `prefix` ("dlock" -> dlock_acquires_total, ...);
/// label values are escaped (\\, \", \n). Every family gets every series, zeros included.
std::string render_openmetrics(const metrics_snapshot& snapshot, std::string_view prefix = "dlock");

namespace detail {
/// What one event changes, independent of where the numbers are kept (dlock::metrics, the
/// prometheus-cpp adapter).
struct metric_effects {
    bool counted = false;  ///< false: the event changes nothing
    bool has_outcome = false;
    acquire_outcome outcome = acquire_outcome::granted;
    bool has_wait = false;
    double wait_seconds = 0;
    bool has_hold = false;
    double hold_seconds = 0;
    bool release = false;
    bool renewal_ok = false;
    bool renewal_failed = false;
    bool has_loss = false;
    std::size_t loss_index = 0;  ///< into loss_reasons
    bool handoff = false;
    bool error = false;
    int holders_delta = 0;
    int waiters_delta = 0;
    bool node_failure = false;  ///< counted per server (event.server), not per family
};
metric_effects effects_of(const lock_event& event) noexcept;
/// Validates options (see metrics::metrics); throws dlock::error.
void validate(const metrics_options& options);
/// The canonical OpenMetrics text of a float: "0.005", "1.0", "+Inf".
std::string metric_number(double value);
/// A label value with \\, \" and \n escaped.
std::string escape_label(std::string_view value);
}  // namespace detail

}  // namespace dlock
