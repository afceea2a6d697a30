// `dlock::prometheus_metrics`: the metrics of dlock::metrics (metrics.hpp, docs/metrics.md),
// registered with a prometheus-cpp registry instead of dlock's own aggregator. Built only when
// prometheus-cpp is found (Debian: prometheus-cpp-dev); link dlock::prometheus.
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   dlock::prometheus_metrics stats(*registry);     // registers dlock_acquires_total, ...
//   dlock::redis::client redis("redis://127.0.0.1", {.observer = stats.observer()});
//   exposer.RegisterCollectable(registry);           // prometheus::Exposer serves /metrics
//
// Same metric names, labels, buckets and family mapping as render_openmetrics(); counters are
// named with their "_total" suffix, as prometheus-cpp expects. Sharing: thread-safe; the registry
// must outlive this object, which must outlive the clients that feed it.
#pragma once

#include <memory>

#include <dlock/event.hpp>
#include <dlock/metrics.hpp>

namespace prometheus {
class Registry;
}

namespace dlock {

class prometheus_metrics {
public:
    /// Registers every metric family with `registry`. Throws dlock::error(errc::invalid_argument)
    /// for bad options (see metrics::metrics).
    explicit prometheus_metrics(prometheus::Registry& registry, metrics_options options = {});
    ~prometheus_metrics();
    prometheus_metrics(const prometheus_metrics&) = delete;
    prometheus_metrics& operator=(const prometheus_metrics&) = delete;

    /// An observer for client_options::observer; it refers to *this.
    dlock::observer observer();
    /// Counts one event. Never throws.
    void record(const lock_event& event) noexcept;

private:
    struct state;
    std::unique_ptr<state> state_;
};

}  // namespace dlock
