// Mutual exclusion on one Redis server: a read-modify-write counter that loses updates without a
// lock must end exact with dlock::mutex, across threads and across processes.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::shared_redis;

constexpr int threads = 8;
constexpr int increments = 200;

/// GET then SET: two round trips with a gap, so concurrent unlocked callers overwrite each other.
void unsafe_increment(dlock::redis::client& redis, const std::string& counter) {
    const auto current = redis.command({"GET", counter});
    const long long value = current.is_nil() ? 0 : std::stoll(current.text);
    std::this_thread::sleep_for(50us);
    redis.command({"SET", counter, std::to_string(value + 1)});
}

long long read_counter(dlock::redis::client& redis, const std::string& counter) {
    const auto r = redis.command({"GET", counter});
    return r.is_nil() ? 0 : std::stoll(r.text);
}

TEST(RedisExclusion, UnlockedCounterLosesUpdates) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = dlock::test::unique_name("counter");
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&] {
            for (int i = 0; i < increments; ++i) unsafe_increment(redis, counter);
        });
    }
    workers.clear();
    EXPECT_LT(read_counter(redis, counter), threads * increments)
        << "without a lock some updates must be lost";
}

TEST(RedisExclusion, EightThreadsTwoHundredIncrementsEach) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = dlock::test::unique_name("counter");
    const auto name = dlock::test::unique_name("lock");
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&] {
            dlock::mutex m(redis, name,
                           {.lease = 10s});  // one mutex object per thread, one lock name
            for (int i = 0; i < increments; ++i) {
                std::unique_lock guard(m);
                unsafe_increment(redis, counter);
            }
        });
    }
    workers.clear();
    EXPECT_EQ(read_counter(redis, counter), threads * increments);
}

TEST(RedisExclusion, ThreadsSharingOneMutexObject) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = dlock::test::unique_name("counter");
    dlock::mutex m(redis, dlock::test::unique_name("lock"), {.lease = 10s});
    std::vector<std::jthread> workers;
    for (int t = 0; t < 4; ++t) {
        workers.emplace_back([&] {
            for (int i = 0; i < 50; ++i) {
                std::scoped_lock guard(m);
                unsafe_increment(redis, counter);
            }
        });
    }
    workers.clear();
    EXPECT_EQ(read_counter(redis, counter), 4 * 50);
}

const bool counter_child =
    dlock::test::register_child("counter", [](const std::vector<std::string>& args) {
        // args: url, lock name, counter key, increments
        dlock::redis::client redis({.url = args.at(0)});
        dlock::mutex m(redis, args.at(1), {.lease = 10s});
        const int n = std::stoi(args.at(3));
        for (int i = 0; i < n; ++i) {
            std::unique_lock guard(m);
            unsafe_increment(redis, args.at(2));
        }
        return 0;
    });

TEST(RedisExclusion, FourProcesses) {
    ASSERT_TRUE(counter_child);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = dlock::test::unique_name("counter");
    const auto name = dlock::test::unique_name("lock");
    constexpr int processes = 4;
    std::vector<std::unique_ptr<dlock::test::child_process>> children;
    for (int p = 0; p < processes; ++p) {
        children.push_back(std::make_unique<dlock::test::child_process>(
            "counter", std::vector<std::string>{shared_redis().url(), name, counter,
                                                std::to_string(increments)}));
    }
    for (auto& child : children) EXPECT_EQ(child->wait(dlock::test::scaled(120s)), 0);
    EXPECT_EQ(read_counter(redis, counter), processes * increments);
}

}  // namespace
