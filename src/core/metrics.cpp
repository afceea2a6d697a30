#include <dlock/metrics.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <shared_mutex>

#include <dlock/error.hpp>

namespace dlock {
namespace {

constexpr std::string_view overflow_family = "~other";

double seconds_between(std::chrono::steady_clock::time_point from,
                       std::chrono::steady_clock::time_point to) noexcept {
    if (to <= from) return 0;
    return std::chrono::duration<double>(to - from).count();
}

struct histogram {
    explicit histogram(const std::vector<double>& b) : bounds(b), counts(b.size() + 1, 0) {}
    void observe(double v) noexcept {
        // The first bucket whose bound is >= v ("le"), else +Inf.
        const auto it = std::lower_bound(bounds.begin(), bounds.end(), v);
        ++counts[static_cast<std::size_t>(it - bounds.begin())];
        sum += v;
    }
    histogram_snapshot snapshot() const {
        histogram_snapshot out;
        out.bounds = bounds;
        out.buckets.reserve(counts.size());
        std::uint64_t running = 0;
        for (const auto c : counts) out.buckets.push_back(running += c);
        out.sum = sum;
        out.count = running;
        return out;
    }
    const std::vector<double>& bounds;
    std::vector<std::uint64_t> counts;  // per bucket, not cumulative
    double sum = 0;
};

struct family_state {
    family_state(const metrics_options& o) : wait(o.wait_buckets), hold(o.hold_buckets) {}
    mutable std::mutex mutex;
    std::array<std::uint64_t, acquire_outcome_count> acquires{};
    histogram wait, hold;
    std::uint64_t releases = 0, renewals_ok = 0, renewals_failed = 0, handoffs = 0, errors = 0;
    std::array<std::uint64_t, loss_reasons.size()> losses{};
    std::int64_t holders = 0, waiters = 0;

    void apply(const detail::metric_effects& e) noexcept {
        std::lock_guard lock(mutex);
        if (e.has_outcome) ++acquires[static_cast<std::size_t>(e.outcome)];
        if (e.has_wait) wait.observe(e.wait_seconds);
        if (e.has_hold) hold.observe(e.hold_seconds);
        if (e.release) ++releases;
        if (e.renewal_ok) ++renewals_ok;
        if (e.renewal_failed) ++renewals_failed;
        if (e.has_loss) ++losses[e.loss_index];
        if (e.handoff) ++handoffs;
        if (e.error) ++errors;
        holders += e.holders_delta;
        waiters += e.waiters_delta;
    }
};

}  // namespace

struct metrics::state {
    explicit state(metrics_options o) : options(std::move(o)) {}
    const metrics_options options;
    mutable std::shared_mutex table_mutex;
    std::map<std::string, std::unique_ptr<family_state>, std::less<>> families;
    mutable std::mutex nodes_mutex;  // guards nodes
    std::map<std::string, std::uint64_t, std::less<>> nodes;

    void node_failed(std::string_view server) {
        std::lock_guard lock(nodes_mutex);
        auto it = nodes.find(server);
        if (it == nodes.end()) {
            const bool full = nodes.size() >= options.max_families;
            it = nodes.try_emplace(full ? std::string(overflow_family) : std::string(server), 0)
                     .first;
        }
        ++it->second;
    }

    family_state& family_for(const std::string& label) {
        {
            std::shared_lock lock(table_mutex);
            if (const auto it = families.find(label); it != families.end()) return *it->second;
        }
        std::unique_lock lock(table_mutex);
        if (const auto it = families.find(label); it != families.end()) return *it->second;
        // Full: the rest share one overflow series (its own slot is always allowed).
        const bool full = families.size() >= options.max_families;
        const std::string key = full ? std::string(overflow_family) : label;
        auto& slot = families[key];
        if (!slot) slot = std::make_unique<family_state>(options);
        return *slot;
    }
};

std::string default_family(std::string_view name) {
    const auto cut = name.find_first_of("/:");
    if (cut == std::string_view::npos) return "*";
    std::string out(name.substr(0, cut + 1));
    out += '*';
    return out;
}

const char* to_string(acquire_outcome outcome) noexcept {
    switch (outcome) {
        case acquire_outcome::granted: return "granted";
        case acquire_outcome::timeout: return "timeout";
        case acquire_outcome::attempts_exhausted: return "attempts_exhausted";
        case acquire_outcome::canceled: return "canceled";
        case acquire_outcome::error: return "error";
    }
    return "unknown";
}

acquire_outcome outcome_of(std::error_code ec) noexcept {
    if (!ec) return acquire_outcome::granted;
    if (ec == errc::timeout) return acquire_outcome::timeout;
    if (ec == errc::attempts_exhausted) return acquire_outcome::attempts_exhausted;
    if (ec == errc::canceled) return acquire_outcome::canceled;
    return acquire_outcome::error;
}

std::uint64_t family_snapshot::losses_by(lost_reason reason) const noexcept {
    for (std::size_t i = 0; i < loss_reasons.size(); ++i) {
        if (loss_reasons[i] == reason) return losses[i];
    }
    return 0;
}

std::uint64_t metrics_snapshot::node_failures(std::string_view server) const noexcept {
    for (const auto& n : nodes) {
        if (n.server == server) return n.failures;
    }
    return 0;
}

const family_snapshot* metrics_snapshot::find(std::string_view family) const noexcept {
    for (const auto& f : families) {
        if (f.family == family) return &f;
    }
    return nullptr;
}

namespace detail {

metric_effects effects_of(const lock_event& event) noexcept {
    metric_effects e;
    const bool timed = event.since != std::chrono::steady_clock::time_point{};
    switch (event.kind) {
        case event_kind::wait_started: e.waiters_delta = 1; break;
        case event_kind::acquired:
            e.has_outcome = true;
            e.outcome = acquire_outcome::granted;
            e.has_wait = timed;
            e.wait_seconds = timed ? seconds_between(event.since, event.at) : 0;
            e.handoff = event.handed_off;
            e.holders_delta = 1;
            e.waiters_delta = event.waited ? -1 : 0;
            break;
        case event_kind::gave_up:
            e.has_outcome = true;
            e.outcome = outcome_of(event.error);
            if (e.outcome == acquire_outcome::granted) e.outcome = acquire_outcome::error;
            e.waiters_delta = event.waited ? -1 : 0;
            break;
        case event_kind::renewed: e.renewal_ok = true; break;
        case event_kind::renewal_failed: e.renewal_failed = true; break;
        case event_kind::released:
            e.release = true;
            e.has_hold = timed;
            e.hold_seconds = timed ? seconds_between(event.since, event.at) : 0;
            e.holders_delta = -1;
            break;
        case event_kind::lost: {
            e.has_hold = timed;
            e.hold_seconds = timed ? seconds_between(event.since, event.at) : 0;
            e.holders_delta = -1;
            const auto it = std::find(loss_reasons.begin(), loss_reasons.end(), event.reason);
            // A lost event always names a reason; an unknown one counts as expired.
            e.has_loss = true;
            e.loss_index =
                it == loss_reasons.end() ? 0 : static_cast<std::size_t>(it - loss_reasons.begin());
            break;
        }
        case event_kind::error: e.error = true; break;
        case event_kind::node_failed: e.node_failure = true; break;
    }
    e.counted = true;
    return e;
}

void validate(const metrics_options& options) {
    const auto check = [](const std::vector<double>& b, const char* field) {
        for (std::size_t i = 0; i < b.size(); ++i) {
            if (!std::isfinite(b[i]) || (i > 0 && !(b[i] > b[i - 1]))) {
                throw error(errc::invalid_argument,
                            std::string("metrics_options::") + field +
                                " must be finite and strictly increasing (bucket " +
                                std::to_string(i) + " is " + metric_number(b[i]) + ")");
            }
        }
    };
    check(options.wait_buckets, "wait_buckets");
    check(options.hold_buckets, "hold_buckets");
    if (options.max_families == 0)
        throw error(errc::invalid_argument, "metrics_options::max_families must be >= 1");
    if (!options.family) throw error(errc::invalid_argument, "metrics_options::family must be set");
}

std::string metric_number(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, value);
    std::string out(buf, r.ptr);
    // Canonical form: an integral value still has its ".0" (le="1.0", as Prometheus writes it).
    if (out.find_first_of(".e") == std::string::npos) out += ".0";
    return out;
}

std::string escape_label(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (const char c : value) {
        switch (c) {
            case '\\': out += "\\\\"; break;
            case '"': out += "\\\""; break;
            case '\n': out += "\\n"; break;
            default: out += c;
        }
    }
    return out;
}

}  // namespace detail

metrics::metrics(metrics_options options) {
    detail::validate(options);
    state_ = std::make_unique<state>(std::move(options));
}

metrics::~metrics() = default;

dlock::observer metrics::observer() {
    return [this](const lock_event& event) { record(event); };
}

void metrics::record(const lock_event& event) noexcept {
    try {
        const auto e = detail::effects_of(event);
        if (!e.counted) return;
        if (e.node_failure) {
            state_->node_failed(event.server);
            return;
        }
        state_->family_for(state_->options.family(event.name)).apply(e);
    } catch (...) {
        // Out of memory, or a throwing mapper: this event is not counted.
    }
}

metrics_snapshot metrics::snapshot() const {
    metrics_snapshot out;
    std::shared_lock lock(state_->table_mutex);
    out.families.reserve(state_->families.size());
    for (const auto& [label, f] : state_->families) {
        family_snapshot s;
        s.family = label;
        std::lock_guard family_lock(f->mutex);
        s.acquires = f->acquires;
        s.wait = f->wait.snapshot();
        s.hold = f->hold.snapshot();
        s.releases = f->releases;
        s.renewals_ok = f->renewals_ok;
        s.renewals_failed = f->renewals_failed;
        s.losses = f->losses;
        s.handoffs = f->handoffs;
        s.errors = f->errors;
        s.holders = f->holders;
        s.waiters = f->waiters;
        out.families.push_back(std::move(s));
    }
    lock.unlock();
    std::lock_guard nodes_lock(state_->nodes_mutex);
    for (const auto& [server, failures] : state_->nodes) out.nodes.push_back({server, failures});
    return out;  // std::map: already sorted by label
}

std::string metrics::render() const { return render_openmetrics(snapshot()); }

namespace {

struct writer {
    std::string& out;
    std::string_view prefix;

    void header(std::string_view name, std::string_view type, std::string_view help,
                std::string_view unit = {}) {
        out += "# TYPE ";
        out += prefix;
        out += name;
        out += ' ';
        out += type;
        out += '\n';
        if (!unit.empty()) {
            out += "# UNIT ";
            out += prefix;
            out += name;
            out += ' ';
            out += unit;
            out += '\n';
        }
        out += "# HELP ";
        out += prefix;
        out += name;
        out += ' ';
        out += help;  // constant texts: nothing to escape
        out += '\n';
    }
    void sample(std::string_view name, std::string_view suffix, std::string_view family,
                std::string_view extra_label, std::string_view extra_value,
                std::string_view value) {
        out += prefix;
        out += name;
        out += suffix;
        out += "{family=\"";
        out += detail::escape_label(family);
        out += '"';
        if (!extra_label.empty()) {
            out += ',';
            out += extra_label;
            out += "=\"";
            out += detail::escape_label(extra_value);
            out += '"';
        }
        out += "} ";
        out += value;
        out += '\n';
    }
    void histogram(std::string_view name, std::string_view help,
                   const std::vector<family_snapshot>& families,
                   histogram_snapshot family_snapshot::*which) {
        header(name, "histogram", help, "seconds");
        for (const auto& f : families) {
            const auto& h = f.*which;
            for (std::size_t i = 0; i < h.buckets.size(); ++i) {
                const auto le = i < h.bounds.size() ? detail::metric_number(h.bounds[i]) : "+Inf";
                sample(name, "_bucket", f.family, "le", le, std::to_string(h.buckets[i]));
            }
            sample(name, "_sum", f.family, {}, {}, detail::metric_number(h.sum));
            sample(name, "_count", f.family, {}, {}, std::to_string(h.count));
        }
    }
};

}  // namespace

std::string render_openmetrics(const metrics_snapshot& snapshot, std::string_view prefix) {
    std::string out;
    std::string base(prefix);
    if (!base.empty() && base.back() != '_') base += '_';
    writer w{out, base};
    const auto& fs = snapshot.families;
    const auto counter = [&](std::string_view name, std::string_view help, auto value) {
        w.header(name, "counter", help);
        for (const auto& f : fs)
            w.sample(name, "_total", f.family, {}, {}, std::to_string(value(f)));
    };
    const auto gauge = [&](std::string_view name, std::string_view help, auto value) {
        w.header(name, "gauge", help);
        for (const auto& f : fs) w.sample(name, "", f.family, {}, {}, std::to_string(value(f)));
    };

    w.header("acquires", "counter", "Acquire calls by outcome.");
    for (const auto& f : fs) {
        for (std::size_t i = 0; i < acquire_outcome_count; ++i) {
            w.sample("acquires", "_total", f.family, "outcome",
                     to_string(static_cast<acquire_outcome>(i)), std::to_string(f.acquires[i]));
        }
    }
    w.histogram("acquire_wait_seconds", "Time from an acquire call to its grant.", fs,
                &family_snapshot::wait);
    w.histogram("hold_seconds", "Time from a grant to its release or loss.", fs,
                &family_snapshot::hold);
    counter("releases", "Grants released by their holder.",
            [](const family_snapshot& f) { return f.releases; });
    w.header("renewals", "counter", "Lease renewals: ok, or failed (one per episode).");
    for (const auto& f : fs) {
        w.sample("renewals", "_total", f.family, "result", "ok", std::to_string(f.renewals_ok));
        w.sample("renewals", "_total", f.family, "result", "failed",
                 std::to_string(f.renewals_failed));
    }
    w.header("losses", "counter", "Grants lost by reason.");
    for (const auto& f : fs) {
        for (std::size_t i = 0; i < loss_reasons.size(); ++i) {
            w.sample("losses", "_total", f.family, "reason", to_string(loss_reasons[i]),
                     std::to_string(f.losses[i]));
        }
    }
    counter("handoffs", "Grants handed directly from the releasing holder to a waiter.",
            [](const family_snapshot& f) { return f.handoffs; });
    counter("errors", "Backend failures while acquiring, renewing or releasing.",
            [](const family_snapshot& f) { return f.errors; });
    gauge("holders", "Grants held now.", [](const family_snapshot& f) { return f.holders; });
    gauge("waiters", "Acquire calls waiting now.",
          [](const family_snapshot& f) { return f.waiters; });
    // Only once a server failed: a client of one server (or a healthy quorum) never has one.
    if (!snapshot.nodes.empty()) {
        w.header("node_failures", "counter",
                 "Redlock votes a server failed to give (unreachable, timed out, refused).");
    }
    for (const auto& n : snapshot.nodes) {
        out += base + "node_failures_total{server=\"" + detail::escape_label(n.server) + "\"} " +
               std::to_string(n.failures) + "\n";
    }
    out += "# EOF\n";
    return out;
}

}  // namespace dlock
