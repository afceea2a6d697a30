// One client serves many locks with one background thread and a bounded set of connections.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

std::size_t thread_count() {
    return static_cast<std::size_t>(
        std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                      std::filesystem::directory_iterator()));
}

int server_clients() {
    std::istringstream lines(shared_redis().command({"CLIENT", "LIST"}));
    int count = 0;
    for (std::string line; std::getline(lines, line);) {
        if (line.find(" name=dlock:") != std::string::npos) ++count;
    }
    return count;
}

TEST(RedisScale, TenThousandHeldLocksAreRenewedByOneThread) {
    const auto baseline_threads = thread_count();
    dlock::redis::client redis({.url = shared_redis().url()});
    EXPECT_EQ(thread_count(), baseline_threads + 1) << "one background thread per client";
    const auto lease = scaled(2s);
    const auto prefix = unique_name();
    std::vector<dlock::lease> held;
    held.reserve(10'000);
    for (int i = 0; i < 10'000; ++i)
        held.push_back(redis.acquire(prefix + "/" + std::to_string(i), {.lease = lease}));
    EXPECT_EQ(thread_count(), baseline_threads + 1) << "holding 10,000 locks adds no thread";
    std::this_thread::sleep_for(lease +
                                lease / 2);  // past the first lease: only renewal keeps them
    std::size_t still_held = 0;
    for (const auto& l : held) still_held += l.state() != dlock::lock_state::lost;
    EXPECT_EQ(still_held, held.size());
    EXPECT_EQ(
        redis.command({"EXISTS", redis.lock_key(prefix + "/0"), redis.lock_key(prefix + "/9999")})
            .integer,
        2);
    held.clear();
    EXPECT_EQ(
        redis.command({"EXISTS", redis.lock_key(prefix + "/0"), redis.lock_key(prefix + "/9999")})
            .integer,
        0);
}

TEST(RedisScale, ConnectionsGoBackToBaselineWhenTheClientIsDestroyed) {
    const auto baseline = server_clients();
    const auto baseline_threads = thread_count();
    {
        dlock::redis::client redis({.url = shared_redis().url()});
        const auto name = unique_name();
        auto holder = redis.acquire(name, {.lease = 30s});
        std::vector<std::jthread> waiters;
        for (int i = 0; i < 4; ++i) {
            waiters.emplace_back([&] {
                dlock::mutex m(redis, name);
                std::unique_lock g(m);
            });
        }
        ASSERT_TRUE(eventually([&] { return server_clients() > baseline; }, 5s));
        holder.release();
        waiters.clear();
    }
    EXPECT_TRUE(eventually([&] { return server_clients() == baseline; }, 5s))
        << "every connection was closed";
    EXPECT_EQ(thread_count(), baseline_threads) << "the background thread was joined";
}

/// A counter from INFO (`field:value` lines), e.g. "total_connections_received"; for
/// commandstats lines (`cmdstat_evalsha:calls=N,...`) the calls count.
long long info_counter(dlock::redis::client& redis, const std::string& section,
                       const std::string& field) {
    std::istringstream lines(redis.command({"INFO", section}).text);
    for (std::string line; std::getline(lines, line);) {
        if (!line.starts_with(field + ":")) continue;
        auto value = line.substr(field.size() + 1);
        if (value.starts_with("calls=")) value = value.substr(6);
        return std::stoll(value);
    }
    return 0;
}

TEST(RedisScale, HundredsOfWaitersOnOneNameCostAFewConnections) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url()});
    const auto name = unique_name();
    const int waiters = dlock::test::time_scale() > 1 ? 200 : 500;
    // Waiters' fallback re-check (the holder's remaining lease) is far beyond this test: every
    // wake-up here comes from a release notification, so a lost one shows as a stuck waiter.
    const dlock::lock_options options{.lease = 120s};
    const auto connections_before = info_counter(redis, "stats", "total_connections_received");
    const auto attempts_before = info_counter(redis, "commandstats", "cmdstat_evalsha");
    std::atomic<int> acquired{0}, inside{0}, overlaps{0};
    std::vector<std::jthread> threads;
    {
        // A holder cycling on the name while the waiters pile up.
        dlock::mutex holder(redis, name, options);
        holder.lock();
        for (int i = 0; i < waiters; ++i) {
            threads.emplace_back([&] {
                dlock::mutex m(redis, name, options);
                std::unique_lock guard(m);
                if (++inside != 1) ++overlaps;
                ++acquired;
                --inside;
            });
        }
        for (int cycle = 0; cycle < 20; ++cycle) {
            holder.unlock();
            std::this_thread::sleep_for(1ms);
            holder.lock();
        }
        holder.unlock();
    }
    EXPECT_TRUE(eventually([&] { return acquired.load() == waiters; }, 60s))
        << acquired.load() << " of " << waiters << " waiters got the lock";
    threads.clear();
    EXPECT_EQ(acquired.load(), waiters);
    EXPECT_EQ(overlaps.load(), 0);
    const auto connections =
        info_counter(redis, "stats", "total_connections_received") - connections_before;
    const auto attempts = info_counter(redis, "commandstats", "cmdstat_evalsha") - attempts_before;
    // The pool's maximum (16) plus the renewal and subscriber connections, and a few spare.
    EXPECT_LE(connections, 16 + 4) << "connections the server accepted while they waited";
    // Each waiter: its first attempt, one after subscribing, one per wake-up; a release wakes one
    // waiter, not all of them.
    EXPECT_LE(attempts, 6LL * waiters) << "acquire/release scripts run while they waited";
}

}  // namespace
