// One client serves many locks with one background thread and a bounded set of connections.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace
