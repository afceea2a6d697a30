// dlock::metrics fed with hand-made events (explicit times): every counter, gauge and histogram,
// the family mapper and its bound, and the exact OpenMetrics text.
#include <dlock/metrics.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <dlock/error.hpp>

namespace {

using namespace std::chrono_literals;
using dlock::acquire_outcome;
using dlock::event_kind;
using dlock::lock_event;
using dlock::lost_reason;
using steady = std::chrono::steady_clock;

const steady::time_point t0 = steady::time_point{} + 1000s;

lock_event ev(event_kind kind, std::string_view name, steady::duration at = {},
              steady::duration since = {}, std::error_code error = {}) {
    lock_event e{kind, name, 7, error, t0 + at};
    if (since != steady::duration{} || kind == event_kind::acquired || kind == event_kind::released)
        e.since = t0 + since;
    return e;
}

TEST(MetricsTest, DefaultFamilyMapsToTheFirstSegment) {
    EXPECT_EQ(dlock::default_family("stock/sku-42"), "stock/*");
    EXPECT_EQ(dlock::default_family("a/b/c"), "a/*");
    EXPECT_EQ(dlock::default_family("orders:eu:7"), "orders:*");
    EXPECT_EQ(dlock::default_family("nightly"), "*");
    EXPECT_EQ(dlock::default_family(""), "*");
}

TEST(MetricsTest, CountsEveryKindOfEvent) {
    dlock::metrics m;
    auto sink = m.observer();
    // Two grants: one at once (3 ms), one after waiting (2 s) and handed off.
    sink(ev(event_kind::acquired, "stock/1", 3ms, 0ms));
    sink(ev(event_kind::wait_started, "stock/2", 1ms));
    auto waited = ev(event_kind::acquired, "stock/2", 2s, 0ms);
    waited.waited = true;
    waited.handed_off = true;
    sink(waited);
    // A timeout after waiting, an exhausted attempt, a cancel and an error, no wait.
    sink(ev(event_kind::wait_started, "stock/3", 1ms));
    auto timeout = ev(event_kind::gave_up, "stock/3", 500ms, 0ms, dlock::errc::timeout);
    timeout.waited = true;
    sink(timeout);
    sink(ev(event_kind::gave_up, "stock/3", 1ms, 0ms, dlock::errc::attempts_exhausted));
    sink(ev(event_kind::gave_up, "stock/3", 1ms, 0ms, dlock::errc::canceled));
    sink(ev(event_kind::gave_up, "stock/3", 1ms, 0ms, dlock::errc::connection_failed));
    sink(ev(event_kind::error, "stock/3", 1ms, {}, dlock::errc::connection_failed));
    // Renewals, one release after 20 s, one loss after 0.5 s.
    sink(ev(event_kind::renewed, "stock/1"));
    sink(ev(event_kind::renewed, "stock/1"));
    sink(ev(event_kind::renewal_failed, "stock/1"));
    auto released = ev(event_kind::released, "stock/1", 20s, 0s);
    released.reason = lost_reason::released;
    sink(released);
    auto lost = ev(event_kind::lost, "stock/2", 2500ms, 2s, dlock::errc::lock_lost);
    lost.reason = lost_reason::taken_over;
    sink(lost);
    // Another family: still waiting.
    sink(ev(event_kind::wait_started, "jobs/x"));

    const auto snap = m.snapshot();
    ASSERT_EQ(snap.families.size(), 2u);
    EXPECT_EQ(snap.families[0].family, "jobs/*");  // sorted
    const auto* s = snap.find("stock/*");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->acquires_by(acquire_outcome::granted), 2u);
    EXPECT_EQ(s->acquires_by(acquire_outcome::timeout), 1u);
    EXPECT_EQ(s->acquires_by(acquire_outcome::attempts_exhausted), 1u);
    EXPECT_EQ(s->acquires_by(acquire_outcome::canceled), 1u);
    EXPECT_EQ(s->acquires_by(acquire_outcome::error), 1u);
    EXPECT_EQ(s->wait.count, 2u);
    EXPECT_DOUBLE_EQ(s->wait.sum, 2.003);
    EXPECT_EQ(s->hold.count, 2u);
    EXPECT_DOUBLE_EQ(s->hold.sum, 20.5);
    EXPECT_EQ(s->releases, 1u);
    EXPECT_EQ(s->renewals_ok, 2u);
    EXPECT_EQ(s->renewals_failed, 1u);
    EXPECT_EQ(s->losses_by(lost_reason::taken_over), 1u);
    EXPECT_EQ(s->losses_by(lost_reason::expired), 0u);
    EXPECT_EQ(s->handoffs, 1u);
    EXPECT_EQ(s->errors, 1u);
    EXPECT_EQ(s->holders, 0);
    EXPECT_EQ(s->waiters, 0);
    EXPECT_EQ(snap.families[0].waiters, 1);

    const std::string text = dlock::render_openmetrics(snap);
    const auto has = [&](const std::string& line) {
        return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
    };
    EXPECT_TRUE(has("# TYPE dlock_acquires counter")) << text;
    EXPECT_TRUE(has("# HELP dlock_acquires Acquire calls by outcome.")) << text;
    EXPECT_TRUE(has("dlock_acquires_total{family=\"stock/*\",outcome=\"granted\"} 2")) << text;
    EXPECT_TRUE(has("dlock_acquires_total{family=\"stock/*\",outcome=\"timeout\"} 1")) << text;
    EXPECT_TRUE(has("dlock_acquires_total{family=\"jobs/*\",outcome=\"granted\"} 0")) << text;
    EXPECT_TRUE(has("# TYPE dlock_acquire_wait_seconds histogram")) << text;
    EXPECT_TRUE(has("# UNIT dlock_acquire_wait_seconds seconds")) << text;
    // 3 ms falls in le=0.005, 2 s in le=5; buckets are cumulative.
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_bucket{family=\"stock/*\",le=\"0.001\"} 0"));
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_bucket{family=\"stock/*\",le=\"0.005\"} 1"));
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_bucket{family=\"stock/*\",le=\"1.0\"} 1"));
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_bucket{family=\"stock/*\",le=\"5.0\"} 2"));
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_bucket{family=\"stock/*\",le=\"+Inf\"} 2"));
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_sum{family=\"stock/*\"} 2.003")) << text;
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_count{family=\"stock/*\"} 2"));
    EXPECT_TRUE(has("dlock_hold_seconds_bucket{family=\"stock/*\",le=\"1.0\"} 1"));
    EXPECT_TRUE(has("dlock_hold_seconds_bucket{family=\"stock/*\",le=\"60.0\"} 2"));
    EXPECT_TRUE(has("dlock_hold_seconds_sum{family=\"stock/*\"} 20.5"));
    EXPECT_TRUE(has("dlock_renewals_total{family=\"stock/*\",result=\"ok\"} 2"));
    EXPECT_TRUE(has("dlock_renewals_total{family=\"stock/*\",result=\"failed\"} 1"));
    EXPECT_TRUE(has("dlock_losses_total{family=\"stock/*\",reason=\"taken_over\"} 1"));
    EXPECT_TRUE(has("dlock_losses_total{family=\"stock/*\",reason=\"session_expired\"} 0"));
    EXPECT_TRUE(has("dlock_handoffs_total{family=\"stock/*\"} 1"));
    EXPECT_TRUE(has("dlock_errors_total{family=\"stock/*\"} 1"));
    EXPECT_TRUE(has("# TYPE dlock_holders gauge"));
    EXPECT_TRUE(has("dlock_holders{family=\"stock/*\"} 0"));
    EXPECT_TRUE(has("dlock_waiters{family=\"jobs/*\"} 1"));
    EXPECT_TRUE(text.ends_with("\n# EOF\n"));
    EXPECT_EQ(text.find("# EOF"), text.size() - 6);  // once, at the end
}

TEST(MetricsTest, ExactTextOfOneFamily) {
    dlock::metrics m({.wait_buckets = {0.5}, .hold_buckets = {1}});
    m.record(ev(event_kind::acquired, "x/1", 250ms, 0ms));
    const std::string expected =
        "# TYPE dlock_acquires counter\n"
        "# HELP dlock_acquires Acquire calls by outcome.\n"
        "dlock_acquires_total{family=\"x/*\",outcome=\"granted\"} 1\n"
        "dlock_acquires_total{family=\"x/*\",outcome=\"timeout\"} 0\n"
        "dlock_acquires_total{family=\"x/*\",outcome=\"attempts_exhausted\"} 0\n"
        "dlock_acquires_total{family=\"x/*\",outcome=\"canceled\"} 0\n"
        "dlock_acquires_total{family=\"x/*\",outcome=\"error\"} 0\n"
        "# TYPE dlock_acquire_wait_seconds histogram\n"
        "# UNIT dlock_acquire_wait_seconds seconds\n"
        "# HELP dlock_acquire_wait_seconds Time from an acquire call to its grant.\n"
        "dlock_acquire_wait_seconds_bucket{family=\"x/*\",le=\"0.5\"} 1\n"
        "dlock_acquire_wait_seconds_bucket{family=\"x/*\",le=\"+Inf\"} 1\n"
        "dlock_acquire_wait_seconds_sum{family=\"x/*\"} 0.25\n"
        "dlock_acquire_wait_seconds_count{family=\"x/*\"} 1\n"
        "# TYPE dlock_hold_seconds histogram\n"
        "# UNIT dlock_hold_seconds seconds\n"
        "# HELP dlock_hold_seconds Time from a grant to its release or loss.\n"
        "dlock_hold_seconds_bucket{family=\"x/*\",le=\"1.0\"} 0\n"
        "dlock_hold_seconds_bucket{family=\"x/*\",le=\"+Inf\"} 0\n"
        "dlock_hold_seconds_sum{family=\"x/*\"} 0.0\n"
        "dlock_hold_seconds_count{family=\"x/*\"} 0\n"
        "# TYPE dlock_releases counter\n"
        "# HELP dlock_releases Grants released by their holder.\n"
        "dlock_releases_total{family=\"x/*\"} 0\n"
        "# TYPE dlock_renewals counter\n"
        "# HELP dlock_renewals Lease renewals: ok, or failed (one per episode).\n"
        "dlock_renewals_total{family=\"x/*\",result=\"ok\"} 0\n"
        "dlock_renewals_total{family=\"x/*\",result=\"failed\"} 0\n"
        "# TYPE dlock_losses counter\n"
        "# HELP dlock_losses Grants lost by reason.\n"
        "dlock_losses_total{family=\"x/*\",reason=\"expired\"} 0\n"
        "dlock_losses_total{family=\"x/*\",reason=\"max_hold\"} 0\n"
        "dlock_losses_total{family=\"x/*\",reason=\"taken_over\"} 0\n"
        "dlock_losses_total{family=\"x/*\",reason=\"deleted\"} 0\n"
        "dlock_losses_total{family=\"x/*\",reason=\"session_expired\"} 0\n"
        "dlock_losses_total{family=\"x/*\",reason=\"client_closed\"} 0\n"
        "# TYPE dlock_handoffs counter\n"
        "# HELP dlock_handoffs Grants handed directly from the releasing holder to a waiter.\n"
        "dlock_handoffs_total{family=\"x/*\"} 0\n"
        "# TYPE dlock_errors counter\n"
        "# HELP dlock_errors Backend failures while acquiring, renewing or releasing.\n"
        "dlock_errors_total{family=\"x/*\"} 0\n"
        "# TYPE dlock_holders gauge\n"
        "# HELP dlock_holders Grants held now.\n"
        "dlock_holders{family=\"x/*\"} 1\n"
        "# TYPE dlock_waiters gauge\n"
        "# HELP dlock_waiters Acquire calls waiting now.\n"
        "dlock_waiters{family=\"x/*\"} 0\n"
        "# EOF\n";
    EXPECT_EQ(m.render(), expected);
}

// node_failed events are counted per server, never per family or lock name, and rendered as
// dlock_node_failures_total{server=...} once a server failed.
TEST(MetricsTest, NodeFailuresAreCountedPerServer) {
    dlock::metrics m({.max_families = 2});
    const auto failed = [&](std::string_view server, std::string_view name) {
        auto e = ev(event_kind::node_failed, name);
        e.server = server;
        e.detail = "connect failed: Connection refused";
        m.record(e);
    };
    failed("127.0.0.1:6380", "a/1");
    failed("127.0.0.1:6380", "b/2");
    failed("127.0.0.1:6381", "a/1");
    auto snap = m.snapshot();
    EXPECT_TRUE(snap.families.empty()) << "no family counts a server's failure";
    EXPECT_EQ(snap.node_failures("127.0.0.1:6380"), 2u);
    EXPECT_EQ(snap.node_failures("127.0.0.1:6381"), 1u);
    EXPECT_EQ(snap.node_failures("127.0.0.1:6382"), 0u);
    failed("127.0.0.1:6382", "a/1");  // past max_families: "~other"
    snap = m.snapshot();
    ASSERT_EQ(snap.nodes.size(), 3u);
    EXPECT_EQ(snap.node_failures("~other"), 1u);
    const auto text = m.render();
    EXPECT_NE(text.find("# TYPE dlock_node_failures counter\n"
                        "# HELP dlock_node_failures Redlock votes a server failed to give "
                        "(unreachable, timed out, refused).\n"
                        "dlock_node_failures_total{server=\"127.0.0.1:6380\"} 2\n"
                        "dlock_node_failures_total{server=\"127.0.0.1:6381\"} 1\n"
                        "dlock_node_failures_total{server=\"~other\"} 1\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("a/1"), std::string::npos) << "a lock name never becomes a label";
    EXPECT_EQ(dlock::metrics().render().find("node_failures"), std::string::npos)
        << "no series before a server failed";
}

TEST(MetricsTest, EmptySnapshotIsJustTheMetadataAndEof) {
    dlock::metrics m;
    const auto text = m.render();
    EXPECT_NE(text.find("# TYPE dlock_acquires counter\n"), std::string::npos);
    EXPECT_EQ(text.find("family="), std::string::npos);
    EXPECT_TRUE(text.ends_with("# EOF\n"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
    dlock::metrics m({.family = [](std::string_view) { return std::string("a\"b\\c\nd"); }});
    m.record(ev(event_kind::renewed, "whatever"));
    const auto text = m.render();
    EXPECT_NE(text.find("dlock_renewals_total{family=\"a\\\"b\\\\c\\nd\",result=\"ok\"} 1\n"),
              std::string::npos)
        << text;
}

TEST(MetricsTest, FamiliesAreBoundedAndNamesNeverBecomeLabels) {
    dlock::metrics m(
        {.family = [](std::string_view n) { return std::string(n); }, .max_families = 3});
    for (int i = 0; i < 10; ++i) m.record(ev(event_kind::renewed, "sku-" + std::to_string(i)));
    const auto snap = m.snapshot();
    ASSERT_EQ(snap.families.size(), 4u);  // 3 + the overflow series
    const auto* other = snap.find("~other");
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(other->renewals_ok, 7u);
}

TEST(MetricsTest, BadOptionsAreRejected) {
    EXPECT_THROW(dlock::metrics({.wait_buckets = {1, 1}}), dlock::error);
    EXPECT_THROW(dlock::metrics({.hold_buckets = {2, 1}}), dlock::error);
    EXPECT_THROW(dlock::metrics({.wait_buckets = {1, std::numeric_limits<double>::infinity()}}),
                 dlock::error);
    EXPECT_THROW(dlock::metrics({.max_families = 0}), dlock::error);
    EXPECT_THROW(dlock::metrics({.family = nullptr}), dlock::error);
}

TEST(MetricsTest, NumbersAreCanonical) {
    EXPECT_EQ(dlock::detail::metric_number(1), "1.0");
    EXPECT_EQ(dlock::detail::metric_number(0.005), "0.005");
    EXPECT_EQ(dlock::detail::metric_number(3600), "3600.0");
    EXPECT_EQ(dlock::detail::metric_number(1e21), "1e+21");
    EXPECT_EQ(dlock::detail::metric_number(std::numeric_limits<double>::infinity()), "+Inf");
}

TEST(MetricsTest, ConcurrentRecordingLosesNothing) {
    dlock::metrics m;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&m, t] {
            const std::string name = "f" + std::to_string(t % 2) + "/x";
            for (int i = 0; i < 2000; ++i) m.record(ev(event_kind::acquired, name, 1ms, 0ms));
        });
    }
    for (auto& t : threads) t.join();
    const auto snap = m.snapshot();
    ASSERT_EQ(snap.families.size(), 2u);
    EXPECT_EQ(snap.families[0].acquires_by(acquire_outcome::granted), 4000u);
    EXPECT_EQ(snap.families[1].wait.count, 4000u);
    EXPECT_EQ(snap.families[1].holders, 4000);
}

}  // namespace
