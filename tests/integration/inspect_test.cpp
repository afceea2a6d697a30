// backend::inspect against real servers: every lock kind's state on Redis (one read-only script),
// the quorum view on Redlock, and the children of the lock node on ZooKeeper. Each test takes
// grants with the public API and checks what inspect() reports, then that it reports them gone.
#include <dlock/config.hpp>
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "redis_fleet.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using dlock::lock_kind;
using dlock::lock_type;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
#if DLOCK_HAS_ZOOKEEPER
using dlock::test::shared_zk;
#endif
using dlock::test::unique_name;

dlock::lease take(dlock::backend& b, const std::string& name, lock_kind kind,
                  std::uint32_t count = 1, std::uint32_t limit = 1,
                  std::chrono::milliseconds wait = 0ms) {
    return b.acquire(name, dlock::lock_request{.kind = kind, .count = count, .limit = limit},
                     dlock::lock_options{.lease = 30s, .wait = wait});
}

/// A thread that waits for `name` (kind `kind`) and holds it until it ends.
struct waiter {
    waiter(dlock::backend& b, std::string name, lock_kind kind)
        : thread([&b, name = std::move(name), kind](std::stop_token stop) {
              // Held until the thread ends; a failure shows as the test's waiters check failing.
              std::error_code ec;
              auto grant = b.acquire(
                  name, dlock::lock_request{.kind = kind},
                  dlock::lock_options{.lease = 30s, .wait = scaled(60s), .cancel = stop}, ec);
              std::mutex m;
              std::condition_variable_any cv;
              std::unique_lock lock(m);
              cv.wait(lock, stop, [] { return false; });
          }) {}
    std::jthread thread;
};

dlock::redis::client redis_client() { return dlock::redis::client({.url = shared_redis().url()}); }

TEST(RedisInspect, FreeName) {
    auto redis = redis_client();
    const auto info = redis.inspect(unique_name());
    EXPECT_EQ(info.type, lock_type::none);
    EXPECT_FALSE(info.held);
    EXPECT_EQ(info.holders, 0u);
    EXPECT_FALSE(info.fencing_counter);
    EXPECT_FALSE(info.lease_left);
    EXPECT_TRUE(info.servers.empty());
}

TEST(RedisInspect, HeldMutexThenReleased) {
    auto redis = redis_client();
    const auto name = unique_name();
    auto grant = take(redis, name, lock_kind::exclusive);
    auto info = redis.inspect(name);
    EXPECT_EQ(info.name, name);
    EXPECT_EQ(info.type, lock_type::mutex);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.holders, 1u);
    EXPECT_EQ(info.fencing_counter, grant.fencing_token());
    ASSERT_TRUE(info.lease_left);
    EXPECT_GT(*info.lease_left, 0ms);
    EXPECT_LE(*info.lease_left, 30s);
    const auto token = grant.fencing_token();
    grant.release();
    info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::none);
    EXPECT_FALSE(info.held);
    EXPECT_EQ(info.fencing_counter, token) << "the counter outlives the grant";
}

TEST(RedisInspect, HeldSemaphore) {
    auto redis = redis_client();
    const auto name = unique_name();
    auto two = take(redis, name, lock_kind::permits, 2, 3);
    auto one = take(redis, name, lock_kind::permits, 1, 3);
    auto info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::counting_semaphore);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.holders, 2u);
    EXPECT_EQ(info.permits_in_use, 3u);
    EXPECT_EQ(info.permit_limit, 3u);
    EXPECT_EQ(info.fencing_counter, one.fencing_token());
    EXPECT_TRUE(info.lease_left);
    two.release();
    one.release();
    info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::counting_semaphore) << "its number of permits stays";
    EXPECT_FALSE(info.held);
    EXPECT_EQ(info.permits_in_use, 0u);
    EXPECT_EQ(info.permit_limit, 3u);
}

TEST(RedisInspect, NameReadersHold) {
    auto redis = redis_client();
    const auto name = unique_name();
    auto r1 = take(redis, name, lock_kind::read);
    auto r2 = take(redis, name, lock_kind::read);
    auto info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::shared_mutex);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.readers, 2u);
    EXPECT_EQ(info.holders, 2u);
    EXPECT_FALSE(info.writer);
    EXPECT_TRUE(info.lease_left);
    // A writer queues behind the readers.
    waiter w(redis, name, lock_kind::write);
    EXPECT_TRUE(eventually([&] { return redis.inspect(name).waiters == 1; }, 10s));
    r1.release();
    r2.release();
    ASSERT_TRUE(eventually([&] { return redis.inspect(name).writer; }, 10s));
    info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::shared_mutex);
    EXPECT_EQ(info.readers, 0u);
    EXPECT_EQ(info.waiters, 0u);
}

TEST(RedisInspect, FairLockWithQueuedWaiter) {
    auto redis = redis_client();
    const auto name = unique_name();
    auto grant = take(redis, name, lock_kind::fair);
    waiter w(redis, name, lock_kind::fair);
    ASSERT_TRUE(eventually([&] { return redis.inspect(name).waiters == 1; }, 10s));
    const auto info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::fair_mutex);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.holders, 1u);
    grant.release();
    EXPECT_TRUE(eventually([&] { return redis.inspect(name).waiters == 0; }, 10s));
}

TEST(RedisInspect, RecursiveDepth) {
    auto redis = redis_client();
    const auto name = unique_name();
    auto outer = take(redis, name, lock_kind::reentrant);
    auto inner = redis.acquire(
        name, dlock::lock_request{.kind = lock_kind::reentrant, .reenter = &outer}, {.lease = 30s});
    const auto info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::recursive_mutex);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.depth, 2u);
    EXPECT_EQ(info.fencing_counter, outer.fencing_token());
}

TEST(RedisInspect, ForeignKeyIsNamed) {
    auto redis = redis_client();
    const auto name = unique_name();
    redis.command({"RPUSH", redis.lock_key(name), "x"});
    const auto info = redis.inspect(name);
    EXPECT_EQ(info.type, lock_type::foreign);
    EXPECT_NE(info.detail.find("is a list"), std::string::npos) << info.detail;
}

TEST(RedisInspect, BadNameIsAnError) {
    auto redis = redis_client();
    std::error_code ec;
    (void)redis.inspect("", ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
}

TEST(RedlockInspect, QuorumViewAndPerServerViews) {
    dlock::test::redis_fleet fleet(3);
    dlock::redlock::client redlock(
        {.urls = fleet.urls(), .command_timeout = scaled(2s), .node_timeout = scaled(250ms)});
    const auto name = unique_name();
    auto grant = take(redlock, name, lock_kind::exclusive);
    auto info = redlock.inspect(name);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.type, lock_type::mutex);
    EXPECT_EQ(info.quorum, 2u);
    EXPECT_EQ(info.held_on, 3u);
    ASSERT_EQ(info.servers.size(), 3u);
    for (const auto& s : info.servers) {
        EXPECT_TRUE(s.held);
        EXPECT_TRUE(s.error.empty());
        EXPECT_FALSE(s.server.empty());
    }
    EXPECT_EQ(info.fencing_counter, grant.fencing_token());

    fleet[2].kill9();
    info = redlock.inspect(name);
    EXPECT_TRUE(info.held) << "held on the 2 of 3 that answer";
    EXPECT_EQ(info.held_on, 2u);
    EXPECT_FALSE(info.servers[2].error.empty());

    fleet[1].kill9();
    std::error_code ec;
    (void)redlock.inspect(name, ec);
    EXPECT_EQ(ec, dlock::errc::quorum_unreachable) << "one server cannot say it is free";
}

#if DLOCK_HAS_ZOOKEEPER
dlock::zk::client zk_client() {
    return dlock::zk::client({.url = shared_zk().url("/dlock-inspect"),
                              .session_timeout = 4s,
                              .connect_timeout = scaled(10s)});
}

TEST(ZkInspect, FreeName) {
    auto zk = zk_client();
    const auto info = zk.inspect(unique_name());
    EXPECT_EQ(info.type, lock_type::none);
    EXPECT_FALSE(info.held);
    EXPECT_FALSE(info.fencing_counter);
}

TEST(ZkInspect, HeldLockWithQueuedWaiter) {
    auto zk = zk_client();
    auto other = zk_client();
    const auto name = unique_name();
    auto grant = take(zk, name, lock_kind::exclusive);
    waiter w(other, name, lock_kind::exclusive);
    ASSERT_TRUE(eventually([&] { return zk.inspect(name).waiters == 1; }, 20s));
    auto info = zk.inspect(name);
    EXPECT_EQ(info.type, lock_type::exclusive);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.holders, 1u);
    EXPECT_EQ(info.fencing_counter, grant.fencing_token());
    EXPECT_FALSE(info.lease_left) << "a holder's lease is its session";
    grant.release();
    ASSERT_TRUE(eventually([&] { return zk.inspect(name).waiters == 0; }, 20s));
    EXPECT_TRUE(zk.inspect(name).held) << "the waiter holds it now";
}

TEST(ZkInspect, ReadersAndSemaphore) {
    auto zk = zk_client();
    const auto name = unique_name("rw");
    auto r1 = take(zk, name, lock_kind::read);
    auto r2 = take(zk, name, lock_kind::read);
    auto info = zk.inspect(name);
    EXPECT_EQ(info.type, lock_type::shared_mutex);
    EXPECT_EQ(info.readers, 2u);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.fencing_counter, std::max(r1.fencing_token(), r2.fencing_token()));

    const auto sem = unique_name("sem");
    auto p = take(zk, sem, lock_kind::permits, 2, 3);
    info = zk.inspect(sem);
    EXPECT_EQ(info.type, lock_type::counting_semaphore);
    EXPECT_EQ(info.permits_in_use, 2u);
    EXPECT_EQ(info.permit_limit, 3u);
    EXPECT_EQ(info.holders, 1u);
    p.release();
    info = zk.inspect(sem);
    EXPECT_FALSE(info.held);
    EXPECT_EQ(info.permit_limit, 3u);
}

#endif  // DLOCK_HAS_ZOOKEEPER

}  // namespace
