// dlock::prometheus_metrics against a real redis-server: the same sequence feeds dlock::metrics
// and the prometheus-cpp adapter; the registry's text exposition carries the same numbers.
#include <dlock/dlock.hpp>
#include <dlock/metrics.hpp>
#include <dlock/prometheus.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <memory>
#include <string>

#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

TEST(PrometheusMetrics, RegistryCarriesTheSameNumbers) {
    auto registry = std::make_shared<prometheus::Registry>();
    dlock::prometheus_metrics adapter(*registry);
    dlock::metrics own;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = [&](const auto& e) {
                                    adapter.record(e);
                                    own.record(e);
                                }});
    const auto family = dlock::default_family(unique_name());
    const auto name = unique_name("a");
    auto held = redis.acquire(name, {.lease = 10s});
    std::error_code ec;
    auto no = redis.acquire(name, {.lease = 10s, .wait = scaled(100ms)}, ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    held.release();

    const auto text = prometheus::TextSerializer().Serialize(registry->Collect());
    const auto has = [&](const std::string& line) {
        return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
    };
    const auto f = "family=\"" + family + "\"";
    EXPECT_TRUE(has("# TYPE dlock_acquires_total counter")) << text;
    EXPECT_TRUE(has("dlock_acquires_total{" + f + ",outcome=\"granted\"} 1")) << text;
    EXPECT_TRUE(has("dlock_acquires_total{" + f + ",outcome=\"timeout\"} 1")) << text;
    EXPECT_TRUE(has("dlock_acquires_total{" + f + ",outcome=\"canceled\"} 0")) << text;
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_count{" + f + "} 1")) << text;
    EXPECT_TRUE(has("dlock_acquire_wait_seconds_bucket{" + f + ",le=\"+Inf\"} 1")) << text;
    EXPECT_TRUE(has("dlock_hold_seconds_count{" + f + "} 1")) << text;
    EXPECT_TRUE(has("dlock_releases_total{" + f + "} 1")) << text;
    EXPECT_TRUE(has("dlock_losses_total{" + f + ",reason=\"deleted\"} 0")) << text;
    EXPECT_TRUE(has("dlock_holders{" + f + "} 0")) << text;
    EXPECT_TRUE(has("dlock_waiters{" + f + "} 0")) << text;
    // The aggregator agrees.
    const auto snap = own.snapshot();
    const auto* mine = snap.find(family);
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->acquires_by(dlock::acquire_outcome::granted), 1u);
    EXPECT_EQ(mine->acquires_by(dlock::acquire_outcome::timeout), 1u);
    EXPECT_EQ(mine->releases, 1u);
}

// A Redlock server failing votes: counted per server in both, never per lock name.
TEST(PrometheusMetrics, NodeFailuresPerServer) {
    auto registry = std::make_shared<prometheus::Registry>();
    dlock::prometheus_metrics adapter(*registry);
    dlock::metrics own;
    for (const auto* server : {"127.0.0.1:6380", "127.0.0.1:6380", "127.0.0.1:6381"}) {
        dlock::lock_event e{dlock::event_kind::node_failed, "stock/sku-1", 0,
                            make_error_code(dlock::errc::connection_failed),
                            std::chrono::steady_clock::now()};
        e.server = server;
        e.detail = "connect failed: Connection refused";
        adapter.record(e);
        own.record(e);
    }
    const auto text = prometheus::TextSerializer().Serialize(registry->Collect());
    const auto has = [&](const std::string& line) {
        return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
    };
    EXPECT_TRUE(has("# TYPE dlock_node_failures_total counter")) << text;
    EXPECT_TRUE(has("dlock_node_failures_total{server=\"127.0.0.1:6380\"} 2")) << text;
    EXPECT_TRUE(has("dlock_node_failures_total{server=\"127.0.0.1:6381\"} 1")) << text;
    EXPECT_EQ(text.find("sku-1"), std::string::npos) << text;
    EXPECT_EQ(own.snapshot().node_failures("127.0.0.1:6380"), 2u);
}

TEST(PrometheusMetrics, BadOptionsAreRejected) {
    prometheus::Registry registry;
    EXPECT_THROW(dlock::prometheus_metrics(registry, {.wait_buckets = {2, 1}}), dlock::error);
}

}  // namespace
