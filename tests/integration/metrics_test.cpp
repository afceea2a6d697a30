// dlock::metrics against a real redis-server: a known sequence of grants, contention (timeout,
// attempts exhausted, cancel), a bad argument, a fair hand-off and four forced losses (key deleted,
// key taken over, renewals off, max_hold), then the rendered OpenMetrics text is scraped and
// every number of the family checked (docs/metrics.md): each counter, each bucket of both
// histograms (against the waits and holds the events themselves carried), their sums, and the
// holders and waiters gauges while held and waiting. A second sequence pauses a server of its own
// to provoke a failed-renewal episode.
#include <dlock/dlock.hpp>
#include <dlock/metrics.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>

#include "redis_fleet.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

/// Sample lines of an OpenMetrics text: "name{labels}" -> value text.
std::map<std::string, std::string> samples(const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line.front() == '#') continue;
        const auto space = line.rfind(' ');
        out[line.substr(0, space)] = line.substr(space + 1);
    }
    return out;
}

double number(const std::map<std::string, std::string>& s, const std::string& series) {
    const auto it = s.find(series);
    if (it == s.end()) {
        ADD_FAILURE() << "no sample " << series;
        return -1;
    }
    return std::stod(it->second);
}

bool key_gone(dlock::redis::client& redis, const std::string& name) {
    return redis.command({"EXISTS", redis.lock_key(name)}).integer == 0;
}

/// The waits (acquired: at - since) and holds (released, lost: at - since) the events carried, in
/// seconds: what the histograms must have counted.
struct durations {
    std::mutex m;
    std::vector<double> waits, holds;
    void record(const dlock::lock_event& e) {
        const auto seconds = std::chrono::duration<double>(e.at - e.since).count();
        std::lock_guard lock(m);
        if (e.kind == dlock::event_kind::acquired) waits.push_back(seconds);
        if (e.kind == dlock::event_kind::released || e.kind == dlock::event_kind::lost)
            holds.push_back(seconds);
    }
};

/// Checks every bucket, the count and the sum of histogram `metric` against `values` (bucket
/// "le" is cumulative: values <= bound).
void expect_histogram(const std::map<std::string, std::string>& s, const std::string& metric,
                      const std::string& family, const std::vector<const char*>& bounds,
                      const std::vector<double>& values) {
    const auto series = [&](const std::string& suffix, const std::string& le = {}) {
        return "dlock_" + metric + suffix + "{family=\"" + family + "\"" +
               (le.empty() ? "" : ",le=\"" + le + "\"") + "}";
    };
    for (const auto* le : bounds) {
        const double bound = std::string(le) == "+Inf" ? 1e300 : std::stod(le);
        double expected = 0;
        for (const auto v : values) expected += v <= bound ? 1 : 0;
        EXPECT_EQ(number(s, series("_bucket", le)), expected) << metric << " le=" << le;
    }
    EXPECT_EQ(number(s, series("_count")), static_cast<double>(values.size())) << metric;
    double sum = 0;
    for (const auto v : values) sum += v;
    EXPECT_NEAR(number(s, series("_sum")), sum, 1e-3 + sum * 1e-6) << metric;
}

const std::vector<const char*> wait_bounds{"0.001", "0.005", "0.01", "0.05", "0.1", "0.5",
                                           "1.0",   "5.0",   "10.0", "60.0", "+Inf"};
const std::vector<const char*> hold_bounds{"0.01", "0.1",   "1.0",    "10.0",
                                           "60.0", "600.0", "3600.0", "+Inf"};

TEST(MetricsRedis, KnownSequenceScrapesToExactNumbers) {
    dlock::metrics stats;
    std::atomic<int> renewed{0}, handed_off{0};
    durations carried;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = [&](const auto& e) {
                                    if (e.kind == dlock::event_kind::renewed) ++renewed;
                                    if (e.kind == dlock::event_kind::acquired && e.handed_off)
                                        ++handed_off;
                                    carried.record(e);
                                    stats.record(e);
                                }});
    const auto family = dlock::default_family(unique_name());
    const auto waiters = [&] {
        const auto s = stats.snapshot();
        const auto* f = s.find(family);
        return f ? f->waiters : 0;
    };
    std::error_code ec;

    // 1. A grant at once.
    const auto a_name = unique_name("a");
    auto a = redis.acquire(a_name, {.lease = 10s});
    const auto gauge = [&](const std::string& metric) {
        return number(samples(stats.render()), "dlock_" + metric + "{family=\"" + family + "\"}");
    };
    EXPECT_EQ(gauge("holders"), 1) << "the rendered gauge while a is held";
    EXPECT_EQ(gauge("waiters"), 0);
    // 2. Contention: a timeout after waiting, attempts exhausted without waiting.
    auto no = redis.acquire(a_name, {.lease = 10s, .wait = scaled(200ms)}, ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    no = redis.acquire(a_name, {.lease = 10s, .max_attempts = 1}, ec);
    EXPECT_EQ(ec, dlock::errc::attempts_exhausted);
    // 3. A cancel while waiting.
    {
        std::stop_source stop;
        std::error_code canceled;
        std::jthread waiter([&] {
            auto l = redis.acquire(a_name, {.lease = 10s, .cancel = stop.get_token()}, canceled);
        });
        ASSERT_TRUE(eventually([&] { return waiters() == 1; }, 10s));
        EXPECT_EQ(gauge("waiters"), 1) << "the rendered gauge while one call waits";
        stop.request_stop();
        waiter.join();
        EXPECT_EQ(canceled, dlock::errc::canceled);
    }
    // 4. A bad argument: an error outcome.
    no = redis.acquire(unique_name("bad"), {.lease = 0ms}, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    // 5. A fair lock handed from its holder to a waiter.
    const auto f_name = unique_name("fair");
    const dlock::lock_request fair{.kind = dlock::lock_kind::fair};
    auto f = redis.acquire(f_name, fair, {.lease = 10s});
    {
        std::error_code waited;
        std::jthread waiter([&] {
            auto l = redis.acquire(f_name, fair, {.lease = 10s}, waited);
            if (!waited) l.release(waited);
        });
        ASSERT_TRUE(eventually([&] { return waiters() == 1; }, 10s));
        f.release();
        waiter.join();
        EXPECT_FALSE(waited);
    }
    // 6. Forced losses: the key deleted, the key taken over, renewals off, max_hold reached.
    const dlock::lock_options renewing{.lease = scaled(3s), .renew_every = scaled(1s)};
    const auto d_name = unique_name("deleted");
    auto d = redis.acquire(d_name, renewing);
    redis.command({"DEL", redis.lock_key(d_name)});
    ASSERT_TRUE(eventually([&] { return d.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(d.lost_reason(), dlock::lost_reason::deleted);

    const auto t_name = unique_name("taken");
    auto t = redis.acquire(t_name, renewing);
    redis.command({"SET", redis.lock_key(t_name), "someone-else"});
    ASSERT_TRUE(eventually([&] { return t.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(t.lost_reason(), dlock::lost_reason::taken_over);
    redis.command({"DEL", redis.lock_key(t_name)});

    const auto e_name = unique_name("expired");
    auto e = redis.acquire(e_name, {.lease = 300ms, .renew = false});
    ASSERT_TRUE(eventually([&] { return e.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(e.lost_reason(), dlock::lost_reason::expired);

    const auto m_name = unique_name("maxhold");
    auto m = redis.acquire(m_name, {.lease = 3s, .max_hold = 300ms});
    ASSERT_TRUE(eventually([&] { return m.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(m.lost_reason(), dlock::lost_reason::max_hold);

    // Releasing a lost grant: lock_lost (an error event), and no second end of the grant.
    for (auto* lost : {&d, &t, &e, &m}) {
        const auto name = lost->name();
        ASSERT_TRUE(eventually([&] { return key_gone(redis, name); }, 10s));
        lost->release(ec);
        EXPECT_EQ(ec, dlock::errc::lock_lost);
    }
    a.release();

    const auto text = stats.render();
    const auto s = samples(text);
    const auto series = [&](const std::string& metric, const std::string& extra = {}) {
        return "dlock_" + metric + "{family=\"" + family + "\"" + (extra.empty() ? "" : ",") +
               extra + "}";
    };
    EXPECT_EQ(number(s, series("acquires_total", "outcome=\"granted\"")), 7) << text;
    EXPECT_EQ(number(s, series("acquires_total", "outcome=\"timeout\"")), 1);
    EXPECT_EQ(number(s, series("acquires_total", "outcome=\"attempts_exhausted\"")), 1);
    EXPECT_EQ(number(s, series("acquires_total", "outcome=\"canceled\"")), 1);
    EXPECT_EQ(number(s, series("acquires_total", "outcome=\"error\"")), 1);
    EXPECT_EQ(number(s, series("acquire_wait_seconds_count")), 7);
    EXPECT_EQ(number(s, series("acquire_wait_seconds_bucket", "le=\"+Inf\"")), 7);
    // The hand-off waiter waited at least from its wait_started to the release.
    EXPECT_GT(number(s, series("acquire_wait_seconds_sum")), 0);
    EXPECT_EQ(number(s, series("hold_seconds_count")), 7);  // 3 released, 4 lost
    EXPECT_EQ(number(s, series("hold_seconds_bucket", "le=\"+Inf\"")), 7);
    // `a` was held through the 200 ms timeout and the cancel; the max_hold grant for ~300 ms.
    EXPECT_GE(number(s, series("hold_seconds_sum")), 0.2 + 0.29);
    EXPECT_EQ(number(s, series("releases_total")), 3);  // a, the fair holder, its waiter
    EXPECT_EQ(number(s, series("renewals_total", "result=\"ok\"")), renewed.load());
    EXPECT_EQ(number(s, series("renewals_total", "result=\"failed\"")), 0);
    EXPECT_EQ(number(s, series("losses_total", "reason=\"deleted\"")), 1);
    EXPECT_EQ(number(s, series("losses_total", "reason=\"taken_over\"")), 1);
    EXPECT_EQ(number(s, series("losses_total", "reason=\"expired\"")), 1);
    EXPECT_EQ(number(s, series("losses_total", "reason=\"max_hold\"")), 1);
    EXPECT_EQ(number(s, series("losses_total", "reason=\"session_expired\"")), 0);
    EXPECT_EQ(number(s, series("losses_total", "reason=\"client_closed\"")), 0);
    // The waiter learns of its grant from the hand-off message, or (rarely) from the refresh
    // it had in flight: both count only when the message handed it over.
    EXPECT_EQ(number(s, series("handoffs_total")), handed_off.load());
    EXPECT_LE(handed_off.load(), 1);
    EXPECT_EQ(number(s, series("errors_total")), 4);  // the four releases of lost grants
    EXPECT_EQ(number(s, series("holders")), 0);
    EXPECT_EQ(number(s, series("waiters")), 0);
    // Every bucket of both histograms, against the waits and holds the events carried; those
    // are themselves bounded by what this test did: the expired and max_hold grants were held
    // at least their 300 ms, `a` through everything (at least the 200 ms timeout).
    std::lock_guard lock(carried.m);
    ASSERT_EQ(carried.waits.size(), 7u);
    ASSERT_EQ(carried.holds.size(), 7u);
    std::size_t long_holds = 0;
    for (const auto h : carried.holds) long_holds += h >= 0.29 ? 1 : 0;
    EXPECT_GE(long_holds, 3u) << "a, the expired and the max_hold grant";
    expect_histogram(s, "acquire_wait_seconds", family, wait_bounds, carried.waits);
    expect_histogram(s, "hold_seconds", family, hold_bounds, carried.holds);
    // Nothing else in the family: each series checked above is all there is.
    std::size_t in_family = 0;
    for (const auto& [k, v] : s) in_family += k.find("family=\"" + family + "\"") != k.npos;
    EXPECT_EQ(in_family, 5u + 11 + 2 + 8 + 2 + 1 + 2 + 6 + 1 + 1 + 2) << text;
    EXPECT_TRUE(text.ends_with("# EOF\n"));
}

// A failed-renewal episode: the server pauses while a grant is held, the watchdog cannot
// confirm the lease (one renewal_failed), the server resumes and the next renewal succeeds.
TEST(MetricsRedis, FailedRenewalEpisodeScrapesToExactNumbers) {
    dlock::test::redis_server server;
    dlock::metrics stats;
    std::atomic<int> renewed{0}, failed{0}, errors{0};
    durations carried;
    dlock::redis::client redis(
        {.url = server.url(), .command_timeout = scaled(300ms), .observer = [&](const auto& e) {
             if (e.kind == dlock::event_kind::renewed) ++renewed;
             if (e.kind == dlock::event_kind::renewal_failed) ++failed;
             if (e.kind == dlock::event_kind::error) ++errors;
             carried.record(e);
             stats.record(e);
         }});
    const auto family = dlock::default_family(unique_name());
    auto held = redis.acquire(unique_name("r"), {.lease = scaled(8s), .renew_every = 200ms});
    ASSERT_TRUE(eventually([&] { return renewed.load() >= 1; }, 10s));
    server.pause();
    ASSERT_TRUE(eventually([&] { return failed.load() == 1; }, 10s)) << "no renewal_failed";
    server.resume();
    const int before = renewed.load();
    ASSERT_TRUE(eventually([&] { return renewed.load() > before; }, 10s)) << "no renewal after";
    held.release();
    EXPECT_EQ(failed.load(), 1) << "one episode";

    const auto text = stats.render();
    const auto s = samples(text);
    const auto series = [&](const std::string& metric, const std::string& extra = {}) {
        return "dlock_" + metric + "{family=\"" + family + "\"" + (extra.empty() ? "" : ",") +
               extra + "}";
    };
    EXPECT_EQ(number(s, series("acquires_total", "outcome=\"granted\"")), 1) << text;
    for (const auto* o : {"timeout", "attempts_exhausted", "canceled", "error"})
        EXPECT_EQ(number(s, series("acquires_total", std::string("outcome=\"") + o + "\"")), 0);
    EXPECT_EQ(number(s, series("renewals_total", "result=\"ok\"")), renewed.load());
    EXPECT_EQ(number(s, series("renewals_total", "result=\"failed\"")), 1);
    EXPECT_EQ(number(s, series("releases_total")), 1);
    for (const auto r : dlock::loss_reasons)
        EXPECT_EQ(number(s, series("losses_total", std::string("reason=\"") + to_string(r) + "\"")),
                  0);
    EXPECT_EQ(number(s, series("handoffs_total")), 0);
    EXPECT_EQ(number(s, series("holders")), 0);
    EXPECT_EQ(number(s, series("waiters")), 0);
    std::lock_guard lock(carried.m);
    expect_histogram(s, "acquire_wait_seconds", family, wait_bounds, carried.waits);
    expect_histogram(s, "hold_seconds", family, hold_bounds, carried.holds);
    // The failed renewals' timeouts are error events: the scrape counts each one reported.
    EXPECT_EQ(number(s, series("errors_total")), errors.load());
}

TEST(MetricsRedis, HoldersAndWaitersAreLive) {
    dlock::metrics stats;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = stats.observer()});
    const auto family = dlock::default_family(unique_name());
    const auto name = unique_name("x");
    const auto at = [&] { return *stats.snapshot().find(family); };
    auto held = redis.acquire(name, {.lease = 10s});
    EXPECT_EQ(at().holders, 1);
    std::error_code ec;
    std::jthread waiter([&] { auto l = redis.acquire(name, {.lease = 10s}, ec); });
    ASSERT_TRUE(eventually([&] { return at().waiters == 1; }, 10s));
    held.release();
    waiter.join();
    EXPECT_FALSE(ec);
    const auto f = at();
    EXPECT_EQ(f.waiters, 0);
    EXPECT_EQ(f.holders, 0);
    EXPECT_EQ(f.acquires_by(dlock::acquire_outcome::granted), 2u);
    EXPECT_EQ(f.releases, 2u);
}

// A degraded Redlock is counted: of five servers one is down and one refuses the client
// (requirepass); each fails every vote (acquire, renewal, release) with a node_failed event that
// names it and says why, and dlock_node_failures_total{server=...} counts them, while locking
// goes on with the quorum of three.
TEST(MetricsRedlock, EachServerFailingAVoteIsCounted) {
    dlock::test::redis_fleet fleet(3);
    dlock::test::redis_server locked({.extra_args = {"--requirepass", "s3cret-pw"}});
    dlock::test::redis_server down;
    down.stop();
    const auto endpoint = [](const dlock::test::redis_server& s) {
        return "127.0.0.1:" + std::to_string(s.port());
    };
    dlock::metrics stats;
    std::mutex m;
    std::map<std::string, std::vector<std::string>> failures;  // server -> each event's detail
    auto urls = fleet.urls();
    urls.push_back(locked.url());
    urls.push_back(down.url());
    dlock::redlock::client redlock({.urls = urls,
                                    .connect_timeout = 2s,
                                    .node_timeout = scaled(200ms),
                                    .observer = [&](const dlock::lock_event& e) {
                                        stats.record(e);
                                        if (e.kind != dlock::event_kind::node_failed) return;
                                        EXPECT_TRUE(e.error);
                                        std::lock_guard lock(m);
                                        failures[std::string(e.server)].push_back(
                                            std::string(e.detail));
                                    }});
    const auto name = unique_name("degraded");
    {
        auto held = redlock.acquire(name, {.lease = scaled(600ms)});
        EXPECT_EQ(held.state(), dlock::lock_state::held) << "three of five still grant";
        // At least one renewal round (every lease/3).
        ASSERT_TRUE(
            eventually([&] { return stats.snapshot().node_failures(endpoint(down)) >= 2; }, 10s));
    }
    const auto snap = stats.snapshot();
    std::lock_guard lock(m);
    ASSERT_EQ(failures.size(), 2u) << "only the two failing servers";
    for (const auto* s : {&locked, &down}) {
        const auto& events = failures[endpoint(*s)];
        ASSERT_GE(events.size(), 3u) << endpoint(*s) << ": the acquire, a renewal, the release";
        EXPECT_EQ(snap.node_failures(endpoint(*s)), events.size());
        for (const auto& why : events) {
            EXPECT_NE(why, "");
            EXPECT_EQ(why.find("s3cret-pw"), std::string::npos) << why;
        }
    }
    EXPECT_NE(failures[endpoint(locked)].front().find("NOAUTH"), std::string::npos)
        << "the cause: " << failures[endpoint(locked)].front();
    for (const auto& u : fleet.urls())
        EXPECT_EQ(snap.node_failures(u.substr(std::string("redis://").size())), 0u);
    const auto text = samples(stats.render());
    EXPECT_EQ(number(text, "dlock_node_failures_total{server=\"" + endpoint(down) + "\"}"),
              static_cast<double>(snap.node_failures(endpoint(down))));
    EXPECT_EQ(number(text, "dlock_node_failures_total{server=\"" + endpoint(locked) + "\"}"),
              static_cast<double>(snap.node_failures(endpoint(locked))));
}

}  // namespace
