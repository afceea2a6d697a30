#include <dlock/prometheus.hpp>

#include <array>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace dlock {
namespace {

constexpr const char* overflow_family = "~other";

// The series of one lock family, created at its first event. prometheus-cpp's metrics are
// thread-safe, so recording takes no lock of ours once they exist.
struct family_series {
    std::array<prometheus::Counter*, acquire_outcome_count> acquires{};
    prometheus::Histogram* wait = nullptr;
    prometheus::Histogram* hold = nullptr;
    prometheus::Counter* releases = nullptr;
    prometheus::Counter* renewals_ok = nullptr;
    prometheus::Counter* renewals_failed = nullptr;
    std::array<prometheus::Counter*, loss_reasons.size()> losses{};
    prometheus::Counter* handoffs = nullptr;
    prometheus::Counter* errors = nullptr;
    prometheus::Gauge* holders = nullptr;
    prometheus::Gauge* waiters = nullptr;
};

}  // namespace

struct prometheus_metrics::state {
    state(prometheus::Registry& registry, metrics_options o)
        : options(std::move(o)),
          acquires(prometheus::BuildCounter()
                       .Name("dlock_acquires_total")
                       .Help("Acquire calls by outcome.")
                       .Register(registry)),
          wait(prometheus::BuildHistogram()
                   .Name("dlock_acquire_wait_seconds")
                   .Help("Time from an acquire call to its grant.")
                   .Register(registry)),
          hold(prometheus::BuildHistogram()
                   .Name("dlock_hold_seconds")
                   .Help("Time from a grant to its release or loss.")
                   .Register(registry)),
          releases(prometheus::BuildCounter()
                       .Name("dlock_releases_total")
                       .Help("Grants released by their holder.")
                       .Register(registry)),
          renewals(prometheus::BuildCounter()
                       .Name("dlock_renewals_total")
                       .Help("Lease renewals: ok, or failed (one per episode).")
                       .Register(registry)),
          losses(prometheus::BuildCounter()
                     .Name("dlock_losses_total")
                     .Help("Grants lost by reason.")
                     .Register(registry)),
          handoffs(prometheus::BuildCounter()
                       .Name("dlock_handoffs_total")
                       .Help("Grants handed directly from the releasing holder to a waiter.")
                       .Register(registry)),
          errors(prometheus::BuildCounter()
                     .Name("dlock_errors_total")
                     .Help("Backend failures while acquiring, renewing or releasing.")
                     .Register(registry)),
          holders(prometheus::BuildGauge()
                      .Name("dlock_holders")
                      .Help("Grants held now.")
                      .Register(registry)),
          waiters(prometheus::BuildGauge()
                      .Name("dlock_waiters")
                      .Help("Acquire calls waiting now.")
                      .Register(registry)),
          node_failures(prometheus::BuildCounter()
                            .Name("dlock_node_failures_total")
                            .Help("Redlock votes a server failed to give (unreachable, timed "
                                  "out, refused).")
                            .Register(registry)) {}

    const metrics_options options;
    prometheus::Family<prometheus::Counter>& acquires;
    prometheus::Family<prometheus::Histogram>& wait;
    prometheus::Family<prometheus::Histogram>& hold;
    prometheus::Family<prometheus::Counter>& releases;
    prometheus::Family<prometheus::Counter>& renewals;
    prometheus::Family<prometheus::Counter>& losses;
    prometheus::Family<prometheus::Counter>& handoffs;
    prometheus::Family<prometheus::Counter>& errors;
    prometheus::Family<prometheus::Gauge>& holders;
    prometheus::Family<prometheus::Gauge>& waiters;
    prometheus::Family<prometheus::Counter>& node_failures;

    std::shared_mutex table_mutex;
    std::map<std::string, family_series, std::less<>> families;

    family_series make(const std::string& f) {
        family_series s;
        for (std::size_t i = 0; i < acquire_outcome_count; ++i) {
            s.acquires[i] = &acquires.Add(
                {{"family", f}, {"outcome", to_string(static_cast<acquire_outcome>(i))}});
        }
        s.wait = &wait.Add({{"family", f}}, options.wait_buckets);
        s.hold = &hold.Add({{"family", f}}, options.hold_buckets);
        s.releases = &releases.Add({{"family", f}});
        s.renewals_ok = &renewals.Add({{"family", f}, {"result", "ok"}});
        s.renewals_failed = &renewals.Add({{"family", f}, {"result", "failed"}});
        for (std::size_t i = 0; i < loss_reasons.size(); ++i)
            s.losses[i] = &losses.Add({{"family", f}, {"reason", to_string(loss_reasons[i])}});
        s.handoffs = &handoffs.Add({{"family", f}});
        s.errors = &errors.Add({{"family", f}});
        s.holders = &holders.Add({{"family", f}});
        s.waiters = &waiters.Add({{"family", f}});
        return s;
    }

    const family_series& series_for(const std::string& label) {
        {
            std::shared_lock lock(table_mutex);
            if (const auto it = families.find(label); it != families.end()) return it->second;
        }
        std::unique_lock lock(table_mutex);
        if (const auto it = families.find(label); it != families.end()) return it->second;
        const std::string key =
            families.size() >= options.max_families ? std::string(overflow_family) : label;
        if (const auto it = families.find(key); it != families.end()) return it->second;
        return families.emplace(key, make(key)).first->second;
    }
};

prometheus_metrics::prometheus_metrics(prometheus::Registry& registry, metrics_options options) {
    detail::validate(options);
    state_ = std::make_unique<state>(registry, std::move(options));
}

prometheus_metrics::~prometheus_metrics() = default;

dlock::observer prometheus_metrics::observer() {
    return [this](const lock_event& event) { record(event); };
}

void prometheus_metrics::record(const lock_event& event) noexcept {
    try {
        const auto e = detail::effects_of(event);
        if (!e.counted) return;
        if (e.node_failure) {
            // One series per server: bounded by the servers the clients are configured with.
            state_->node_failures.Add({{"server", std::string(event.server)}}).Increment();
            return;
        }
        const auto& s = state_->series_for(state_->options.family(event.name));
        if (e.has_outcome) s.acquires[static_cast<std::size_t>(e.outcome)]->Increment();
        if (e.has_wait) s.wait->Observe(e.wait_seconds);
        if (e.has_hold) s.hold->Observe(e.hold_seconds);
        if (e.release) s.releases->Increment();
        if (e.renewal_ok) s.renewals_ok->Increment();
        if (e.renewal_failed) s.renewals_failed->Increment();
        if (e.has_loss) s.losses[e.loss_index]->Increment();
        if (e.handoff) s.handoffs->Increment();
        if (e.error) s.errors->Increment();
        if (e.holders_delta != 0) s.holders->Increment(e.holders_delta);
        if (e.waiters_delta != 0) s.waiters->Increment(e.waiters_delta);
    } catch (...) {
        // Out of memory, or a throwing mapper: this event is not counted.
    }
}

}  // namespace dlock
