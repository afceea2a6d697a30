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

#include "redis/scripts.hpp"

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

long long integer_of(const dlock::redis::reply& r) {
    if (r.is_nil()) return 0;
    return r.type == dlock::redis::reply::kind::integer ? r.integer : std::stoll(r.text);
}

long long queue_length(dlock::redis::client& redis, const std::string& name) {
    return integer_of(redis.command({"ZCARD", redis.lock_key(name) + ":queue"}));
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

// Earlier versions kept the waiters' liveness in a hash; the scripts drop it at their first purge
// (its waiters join again) instead of failing on it, on the attempt's path and on the release's.
TEST(FairMutex, LivenessHashOfEarlierVersionsIsDropped) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    const auto key = redis.lock_key(name);
    const auto old_queue = [&] {
        redis.command({"ZADD", key + ":queue", "1", "fair:earlier.1"});
        redis.command({"DEL", key + ":alive"});
        redis.command({"HSET", key + ":alive", "fair:earlier.1", "99999999999999"});
    };
    // An attempt while another holds it: it joins (and, a try_lock, leaves) the new layout.
    redis.command({"SET", key, "fair:someone.1", "PX", "60000"});
    old_queue();
    dlock::fair_mutex waiter(redis, name);
    EXPECT_FALSE(waiter.try_lock());
    EXPECT_NE(redis.command({"TYPE", key + ":alive"}).text, "hash");
    // A release with an old queue behind it: the key goes, nobody is handed it.
    redis.command({"DEL", key, key + ":queue", key + ":alive"});
    dlock::fair_mutex holder(redis, name);
    ASSERT_TRUE(holder.try_lock());
    old_queue();
    holder.unlock();
    EXPECT_EQ(integer_of(redis.command({"EXISTS", key})), 0);
    EXPECT_EQ(integer_of(redis.command({"EXISTS", key + ":alive"})), 0);
    EXPECT_TRUE(waiter.try_lock());
    waiter.unlock();
}

// A waiter told no ticket yet is joining: the script draws a ticket and adds it only if absent. A
// repeated first attempt (its reply was lost) must keep the place it has, not move behind those
// who joined meanwhile.
TEST(FairMutex, RepeatedFirstAttemptKeepsItsPlace) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    const auto key = redis.lock_key(name);
    const auto* acquire = dlock::redis::detail::find_script("fair_acquire");
    ASSERT_NE(acquire, nullptr);
    const auto attempt = [&](const std::string& token) {
        // KEYS as fair_acquire.lua; ARGV: token, lease, -, -, liveness, channel, -, ticket floor
        // (0: told none), -, idle expiry.
        return redis.command({"EVAL", std::string(acquire->source), "5", key, redis.fence_key(name),
                              key + ":queue", key + ":alive", key + ":arrivals", token, "60000",
                              "1", "0", "60000", redis.release_channel(name), "0", "0", "",
                              "60000"});
    };
    // {0, the holder's remaining ms, the waiter's ticket}
    const auto ticket = [&](const std::string& token) {
        const auto r = attempt(token);
        EXPECT_EQ(r.type, dlock::redis::reply::kind::array) << r.text;
        return r.elements.size() == 3 ? r.elements[2].integer : -1;
    };
    redis.command({"SET", key, "fair:holder.1", "PX", "60000"});
    const auto first = ticket("fair:early.1");
    EXPECT_GT(ticket("fair:late.1"), first);
    EXPECT_EQ(ticket("fair:early.1"), first) << "a repeated first attempt drew a new place";
    const auto order = redis.command({"ZRANGE", key + ":queue", "0", "-1"});
    ASSERT_EQ(order.elements.size(), 2u);
    EXPECT_EQ(order.elements[0].text, "fair:early.1") << "the first to join stays first";
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

TEST(FairMutex, KeysOfAnUnusedNameExpire) { dlock::test::keys_of_an_unused_name_expire("fair"); }

TEST(FairMutex, RefreshCostDoesNotGrowWithTheQueue) {
    dlock::test::refresh_cost_does_not_grow_with_the_queue("fair");
}

}  // namespace
