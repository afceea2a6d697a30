// dlock::fair_mutex on one Redis server: exclusion, strict FIFO among waiters, direct hand-off
// (no barging, one notification), waiters that give up leave the queue (docs/lock-family.md).
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "queued_lock_checks.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

void unsafe_increment(dlock::redis::client& redis, const std::string& counter) {
    const auto current = redis.command({"GET", counter});
    const long long value = current.is_nil() ? 0 : std::stoll(current.text);
    std::this_thread::sleep_for(50us);
    redis.command({"SET", counter, std::to_string(value + 1)});
}

long long integer_of(const dlock::redis::reply& r) {
    if (r.is_nil()) return 0;
    return r.type == dlock::redis::reply::kind::integer ? r.integer : std::stoll(r.text);
}

long long queue_length(dlock::redis::client& redis, const std::string& name) {
    return integer_of(redis.command({"ZCARD", redis.lock_key(name) + ":queue"}));
}

TEST(FairMutex, EightThreadsCounterIsExact) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = unique_name("counter");
    const auto name = unique_name("lock");
    std::vector<std::jthread> workers;
    for (int t = 0; t < 8; ++t) {
        workers.emplace_back([&] {
            dlock::fair_mutex m(redis, name, {.lease = 10s});
            for (int i = 0; i < 100; ++i) {
                std::unique_lock guard(m);
                unsafe_increment(redis, counter);
            }
        });
    }
    workers.clear();
    EXPECT_EQ(integer_of(redis.command({"GET", counter})), 800);
    EXPECT_EQ(queue_length(redis, name), 0);
}

const bool counter_child =
    dlock::test::register_child("fair-counter", [](const std::vector<std::string>& args) {
        dlock::redis::client redis({.url = args.at(0)});
        dlock::fair_mutex m(redis, args.at(1), {.lease = 10s});
        for (int i = 0; i < std::stoi(args.at(3)); ++i) {
            std::unique_lock guard(m);
            unsafe_increment(redis, args.at(2));
        }
        return 0;
    });

TEST(FairMutex, ThreeProcessesCounterIsExact) {
    ASSERT_TRUE(counter_child);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = unique_name("counter");
    const auto name = unique_name("lock");
    std::vector<std::unique_ptr<dlock::test::child_process>> children;
    for (int p = 0; p < 3; ++p) {
        children.push_back(std::make_unique<dlock::test::child_process>(
            "fair-counter", std::vector<std::string>{shared_redis().url(), name, counter, "100"}));
    }
    for (auto& child : children) EXPECT_EQ(child->wait(scaled(120s)), 0);
    EXPECT_EQ(integer_of(redis.command({"GET", counter})), 300);
}

TEST(FairMutex, WaitersAreServedInArrivalOrder) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    dlock::fair_mutex holder(redis, name);
    holder.lock();
    constexpr int waiters = 6;
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::jthread> threads;
    for (int i = 0; i < waiters; ++i) {
        threads.emplace_back([&, i] {
            dlock::fair_mutex m(redis, name);
            std::unique_lock guard(m);
            std::lock_guard record(order_mutex);
            order.push_back(i);
        });
        // The next waiter starts only once this one has its place in the queue.
        ASSERT_TRUE(eventually([&] { return queue_length(redis, name) == i + 1; }, 5s));
    }
    holder.unlock();
    threads.clear();
    std::vector<int> expected;
    for (int i = 0; i < waiters; ++i) expected.push_back(i);
    EXPECT_EQ(order, expected);
}

TEST(FairMutex, ReleaseHandsOverDirectlySoNobodyBargesIn) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    dlock::fair_mutex holder(redis, name);
    holder.lock();
    const auto first_token = holder.fencing_token();
    std::atomic<std::uint64_t> waiter_token{0};
    std::jthread waiter([&] {
        dlock::fair_mutex m(redis, name);
        m.lock();
        waiter_token = m.fencing_token();
        std::this_thread::sleep_for(scaled(200ms));
        m.unlock();
    });
    ASSERT_TRUE(eventually([&] { return queue_length(redis, name) == 1; }, 5s));
    holder.unlock();
    // The release made the waiter the owner on the server: a newcomer cannot take the lock even
    // before the waiter has woken.
    dlock::fair_mutex barger(redis, name);
    EXPECT_FALSE(barger.try_lock());
    ASSERT_TRUE(eventually([&] { return waiter_token.load() != 0; }, 5s));
    EXPECT_GT(waiter_token.load(), first_token);
    waiter.join();
    EXPECT_TRUE(barger.try_lock());
    EXPECT_GT(barger.fencing_token(), waiter_token.load());
}

TEST(FairMutex, HandOffNeedsNoRoundTripAndWakesOnlyTheHead) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    dlock::fair_mutex holder(redis, name, {.lease = 60s});
    holder.lock();
    std::atomic<int> granted{0};
    std::vector<std::jthread> threads;
    for (int i = 0; i < 3; ++i) {
        threads.emplace_back([&] {
            dlock::fair_mutex m(redis, name, {.lease = 60s});
            m.lock();
            ++granted;
            std::this_thread::sleep_for(scaled(300ms));
        });
        ASSERT_TRUE(eventually([&] { return queue_length(redis, name) == i + 1; }, 5s));
    }
    holder.unlock();
    // Only the head was granted; the others stay queued (nobody else woke and took it).
    ASSERT_TRUE(eventually([&] { return granted.load() == 1; }, 5s));
    EXPECT_EQ(queue_length(redis, name), 2);
    threads.clear();
    EXPECT_EQ(granted.load(), 3);
}

TEST(FairMutex, WaiterThatTimesOutLeavesTheQueue) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    dlock::fair_mutex holder(redis, name);
    holder.lock();
    dlock::fair_mutex waiter(redis, name);
    EXPECT_FALSE(waiter.try_lock_for(scaled(300ms)));
    EXPECT_EQ(queue_length(redis, name), 0);
    EXPECT_EQ(integer_of(redis.command({"HLEN", redis.lock_key(name) + ":alive"})), 0);
    holder.unlock();
    EXPECT_TRUE(waiter.try_lock());
}

TEST(FairMutex, CanceledWaiterLeavesTheQueueAndHoldsNothing) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    dlock::fair_mutex holder(redis, name);
    holder.lock();
    std::stop_source stop;
    std::error_code ec;
    std::jthread waiter([&] {
        auto l = redis.acquire_until(name, dlock::lock_request{dlock::lock_kind::fair},
                                     {.cancel = stop.get_token()},
                                     std::chrono::steady_clock::time_point::max(), ec);
        EXPECT_FALSE(l);
    });
    ASSERT_TRUE(eventually([&] { return queue_length(redis, name) == 1; }, 5s));
    stop.request_stop();
    waiter.join();
    EXPECT_EQ(ec, dlock::errc::canceled);
    EXPECT_EQ(queue_length(redis, name), 0);
}

TEST(FairMutex, RenewedPastItsLeaseAfterAHandOff) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    dlock::fair_mutex holder(redis, name);
    const auto lease = scaled(500ms);
    dlock::fair_mutex waiter(redis, name, {.lease = lease});
    std::promise<void> locked;
    std::jthread release([&] {
        holder.lock();  // unlocked by the thread that locked it, as with a std::mutex
        locked.set_value();
        EXPECT_TRUE(eventually([&] { return queue_length(redis, name) == 1; }, 5s));
        holder.unlock();
    });
    locked.get_future().wait();
    waiter.lock();
    // The hand-off lease is short; the watchdog extends it to the waiter's own lease and keeps
    // renewing it.
    std::this_thread::sleep_for(3 * lease);
    EXPECT_EQ(waiter.state(), dlock::lock_state::held);
    dlock::fair_mutex other(redis, name);
    EXPECT_FALSE(other.try_lock());
}

TEST(FairMutex, PlainMutexKeyOfAnotherTypeIsAnError) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    redis.command({"HSET", redis.lock_key(name), "x", "1"});
    dlock::fair_mutex m(redis, name);
    try {
        (void)m.try_lock();
        FAIL() << "expected an error";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::unexpected_reply) << e.what();
    }
    EXPECT_EQ(integer_of(redis.command({"HGET", redis.lock_key(name), "x"})), 1);
}

TEST(FairMutex, RedlockRefusesTheFairKind) {
    // Refused before any server is contacted, so the other two need not exist.
    dlock::redlock::client redlock(
        {.urls = {shared_redis().url(),
                  "redis://127.0.0.1:" + std::to_string(dlock::test::free_port()),
                  "redis://127.0.0.1:" + std::to_string(dlock::test::free_port())}});
    dlock::fair_mutex m(redlock, unique_name("lock"));
    try {
        (void)m.try_lock();
        FAIL() << "expected errc::unsupported";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::unsupported) << e.what();
    }
}

}  // namespace

namespace {

TEST(FairMutex, HandOffValidityIsCappedByTheOwnLease) {
    dlock::test::handoff_validity_is_capped("fair", {.lease = 1s}, 1s);
}

TEST(FairMutex, HandOffValidityIsCappedByMaxHold) {
    dlock::test::handoff_validity_is_capped("fair", {.lease = 30s, .max_hold = 1s}, 1s);
}

TEST(FairMutex, HandOffValidityOfAFixedLeaseIsCappedByIt) {
    dlock::test::handoff_validity_is_capped("fair", {.lease = 1s, .renew = false}, 1s);
}

TEST(FairMutex, KeysOfAnUnusedNameExpireButTheFencingCounter) {
    dlock::test::keys_of_an_unused_name_expire("fair");
}

TEST(FairMutex, RefreshCostDoesNotGrowWithTheQueue) {
    dlock::test::refresh_cost_does_not_grow_with_the_queue("fair");
}

}  // namespace
