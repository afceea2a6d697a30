// Waiting without polling: waiters sleep on the client's one subscriber connection and are woken
// by the release's PUBLISH (a wake-up on their hand-off channel); a crashed holder (no message)
// costs at most its remaining lease.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

/// Lines of CLIENT LIST whose name= field equals `name`.
int connections_named(const std::string& name) {
    std::istringstream lines(shared_redis().command({"CLIENT", "LIST"}));
    int count = 0;
    for (std::string line; std::getline(lines, line);) {
        if (line.find(" name=" + name + " ") != std::string::npos) ++count;
    }
    return count;
}

/// Client connections subscribed to wake-ups of dlock::mutex `name`: a waiting client listens on
/// its own hand-off channel for the name, <release channel>:mutex:<client> (docs/redis-lock.md,
/// "Waking one waiter"), subscribed once however many of its threads wait.
long long wake_subscribers(dlock::redis::client& redis, const std::string& name) {
    const auto channels =
        redis.command({"PUBSUB", "CHANNELS", redis.release_channel(name) + ":mutex:*"});
    long long n = 0;
    for (const auto& c : channels.elements)
        n += redis.command({"PUBSUB", "NUMSUB", c.text}).elements.at(1).integer;
    return n;
}

TEST(RedisWaiting, UnlockWakesWaiterLongBeforeTheLeaseRunsOut) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::mutex holder(redis, name, {.lease = 60s});  // the TTL fallback would take a minute
    holder.lock();
    std::atomic<bool> acquired{false};
    std::jthread waiter([&] {
        dlock::mutex m(redis, name, {.lease = 60s});
        m.lock();
        acquired = true;
        m.unlock();
    });
    EXPECT_TRUE(eventually([&] { return wake_subscribers(redis, name) == 1; }, 5s))
        << "the waiter subscribes to its hand-off channel";
    EXPECT_FALSE(acquired.load());
    holder.unlock();
    EXPECT_TRUE(eventually([&] { return acquired.load(); }, 10s))
        << "woken by the release notification";
}

TEST(RedisWaiting, WaiterInAnotherClientIsWokenToo) {
    dlock::redis::client holder_client({.url = shared_redis().url()});
    dlock::redis::client waiter_client({.url = shared_redis().url()});
    const auto name = unique_name();
    auto grant = holder_client.acquire(name, {.lease = 60s});
    std::atomic<bool> acquired{false};
    std::jthread waiter([&] {
        auto mine = waiter_client.acquire(name, {.lease = 60s});
        acquired = true;
    });
    ASSERT_TRUE(eventually([&] { return wake_subscribers(waiter_client, name) == 1; }, 5s));
    grant.release();
    EXPECT_TRUE(eventually([&] { return acquired.load(); }, 10s));
}

TEST(RedisWaiting, MissedNotificationCostsAtMostTheHoldersLease) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto lease = scaled(1200ms);
    // A holder whose key just expires (no release, so no PUBLISH): like a crashed holder.
    redis.command(
        {"SET", redis.lock_key(name), "crashed-holder", "PX", std::to_string(lease.count())});
    const auto start = std::chrono::steady_clock::now();
    dlock::mutex m(redis, name);
    ASSERT_TRUE(m.try_lock_for(lease + scaled(2s)));
    EXPECT_GE(std::chrono::steady_clock::now() - start, lease - 100ms);
    m.unlock();
}

TEST(RedisWaiting, ManyWaitersShareOneSubscriberConnection) {
    dlock::redis::client redis({.url = shared_redis().url()});
    constexpr int locks = 4;
    constexpr int waiters_per_lock = 5;
    std::vector<std::string> names;
    std::vector<dlock::lease> held;
    for (int i = 0; i < locks; ++i) {
        names.push_back(unique_name(std::to_string(i)));
        held.push_back(redis.acquire(names.back(), {.lease = 60s}));
    }
    std::atomic<int> acquired{0};
    std::vector<std::jthread> waiters;
    for (int i = 0; i < locks; ++i) {
        for (int w = 0; w < waiters_per_lock; ++w) {
            waiters.emplace_back([&, i] {
                dlock::mutex m(redis, names[i], {.lease = 60s});
                std::unique_lock guard(m);
                ++acquired;
            });
        }
    }
    ASSERT_TRUE(eventually(
        [&] {
            for (const auto& n : names) {
                if (wake_subscribers(redis, n) != 1) return false;
            }
            return true;
        },
        10s))
        << "each lock's wake-ups have exactly one subscriber: this client's shared connection";
    EXPECT_EQ(connections_named("dlock:sub"), 1)
        << "one subscriber connection for all " << locks * waiters_per_lock << " waiters";
    held.clear();  // release all: the waiters take turns
    EXPECT_TRUE(eventually([&] { return acquired.load() == locks * waiters_per_lock; }, 20s));
    waiters.clear();
}

TEST(RedisWaiting, BlockedWaiterGetsLockAfterHolderCrash) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    const auto lease = scaled(1500ms);
    dlock::test::child_process holder(
        "holder",  // registered in redis_lock_test.cpp: acquires, marks, sleeps until killed
        {shared_redis().url(), name, std::to_string(lease.count()), marker});
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    std::atomic<bool> acquired{false};
    std::jthread waiter([&] {
        dlock::mutex m(redis, name);
        m.lock();  // blocks: no notification will ever come from the dead holder
        acquired = true;
        m.unlock();
    });
    ASSERT_TRUE(eventually([&] { return wake_subscribers(redis, name) == 1; }, 5s));
    holder.kill9();
    EXPECT_TRUE(eventually([&] { return acquired.load(); }, lease + scaled(2s)));
}

TEST(RedisWaiting, AttemptsLimitGivesUpWithItsOwnError) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    auto grant = redis.acquire(name);
    std::error_code ec;
    auto second = redis.acquire(name, {.wait = 10s, .max_attempts = 2}, ec);
    EXPECT_EQ(ec, dlock::errc::attempts_exhausted);
    EXPECT_FALSE(second);
    dlock::mutex m(redis, name, {.max_attempts = 1});
    EXPECT_FALSE(m.try_lock_for(5s)) << "contention is not an error for try_lock_for";
    try {
        m.lock();
        FAIL() << "lock() must report the exhausted attempts";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::attempts_exhausted);
    }
}

TEST(RedisWaiting, CancelEndsAWaitAndLeavesNothingHeld) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    auto holder = redis.acquire(name, {.lease = 60s});
    std::stop_source stop;
    std::atomic<bool> done{false};
    std::error_code seen;
    std::jthread waiter([&] {
        auto grant = redis.acquire(name, {.lease = 60s, .cancel = stop.get_token()}, seen);
        done = true;
    });
    ASSERT_TRUE(eventually([&] { return wake_subscribers(redis, name) == 1; }, 5s))
        << "the waiter is asleep on the release channel";
    EXPECT_FALSE(done.load());
    stop.request_stop();
    EXPECT_TRUE(eventually([&] { return done.load(); }, 5s))
        << "woken by the cancel, not the lease";
    waiter.join();
    EXPECT_EQ(seen, dlock::errc::canceled);
    EXPECT_EQ(holder.state(), dlock::lock_state::held) << "the holder is untouched";

    std::stop_source already;
    already.request_stop();
    dlock::mutex m(redis, name, {.cancel = already.get_token()});
    try {
        (void)m.try_lock_for(10s);
        FAIL() << "a canceled wait is not contention";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::canceled);
    }
}

}  // namespace
