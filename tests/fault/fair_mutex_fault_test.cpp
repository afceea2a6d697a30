// Faults against dlock::fair_mutex: waiters and holders killed with SIGKILL (no release, no
// leave). The queue must not stall behind the dead: a dead waiter loses its place within the
// waiter liveness (2 s), a hand-off to a waiter that died expires after the hand-off lease (2 s),
// and a dead holder's lease runs out as with dlock::mutex.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <string>
#include <thread>

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

const bool fair_locker =
    dlock::test::register_child("fair_locker", [](const std::vector<std::string>& args) {
        // args: url, lock name, lease ms, marker key. Locks, sets the marker, holds until killed.
        dlock::redis::client redis({.url = args.at(0)});
        dlock::fair_mutex m(redis, args.at(1),
                            {.lease = std::chrono::milliseconds(std::stoll(args.at(2)))});
        m.lock();
        redis.command({"SET", args.at(3), std::to_string(m.fencing_token())});
        std::this_thread::sleep_for(10min);
        return 0;
    });

TEST(FairMutexFault, KilledHolderFreesTheLockForTheNextWaiter) {
    ASSERT_TRUE(fair_locker);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    const auto lease = scaled(1500ms);
    dlock::test::child_process holder(
        "fair_locker", {shared_redis().url(), name, std::to_string(lease.count()), marker});
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    const auto holder_token = integer_of(redis.command({"GET", marker}));
    holder.kill9();
    const auto killed_at = std::chrono::steady_clock::now();
    dlock::fair_mutex m(redis, name);
    ASSERT_TRUE(m.try_lock_for(lease + scaled(3s)));
    EXPECT_LE(std::chrono::steady_clock::now() - killed_at, lease + scaled(2s));
    EXPECT_GT(m.fencing_token(), static_cast<std::uint64_t>(holder_token));
    EXPECT_EQ(queue_length(redis, name), 0);
}

TEST(FairMutexFault, KilledQueuedWaiterIsSkippedAtHandOff) {
    ASSERT_TRUE(fair_locker);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::fair_mutex holder(redis, name);
    holder.lock();
    dlock::test::child_process doomed("fair_locker",
                                      {shared_redis().url(), name, "30000", unique_name("marker")});
    ASSERT_TRUE(eventually([&] { return queue_length(redis, name) == 1; }, 10s));
    std::atomic<bool> granted{false};
    std::jthread live([&] {
        dlock::fair_mutex m(redis, name);
        m.lock();
        granted = true;
    });
    ASSERT_TRUE(eventually([&] { return queue_length(redis, name) == 2; }, 10s));
    doomed.kill9();
    EXPECT_EQ(doomed.wait(scaled(10s)), 128 + SIGKILL);
    // Past the dead waiter's liveness (2 s), the release skips it and hands over to the live one.
    std::this_thread::sleep_for(2100ms);
    holder.unlock();
    EXPECT_TRUE(eventually([&] { return granted.load(); }, 2s));
    live.join();
    EXPECT_EQ(queue_length(redis, name), 0);
}

TEST(FairMutexFault, HandOffToAWaiterThatDiedExpiresSoon) {
    ASSERT_TRUE(fair_locker);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    dlock::fair_mutex holder(redis, name);
    holder.lock();
    dlock::test::child_process doomed("fair_locker", {shared_redis().url(), name, "30000", marker});
    ASSERT_TRUE(eventually([&] { return queue_length(redis, name) == 1; }, 10s));
    // Frozen while still live and with nothing in flight: the hand-off goes to it, then it dies
    // without ever renewing. (Frozen with its post-SUBSCRIBE attempt in flight, that attempt
    // would take the handed-over lock with its full 30 s lease.)
    const auto key = redis.lock_key(name);
    ASSERT_TRUE(dlock::test::freeze_between_refreshes(redis, key, key + ":queue", key + ":alive", 1,
                                                      doomed));
    holder.unlock();
    EXPECT_EQ(queue_length(redis, name), 0);
    doomed.kill9();
    const auto killed_at = std::chrono::steady_clock::now();
    EXPECT_TRUE(redis.command({"GET", marker}).is_nil()) << "it never saw its grant";
    dlock::fair_mutex next(redis, name);
    ASSERT_TRUE(next.try_lock_for(scaled(10s)));
    // The hand-off lease is 2 s, not the dead waiter's 30 s lease.
    EXPECT_LE(std::chrono::steady_clock::now() - killed_at, 2s + scaled(1s));
}

}  // namespace

namespace {

const bool queued_waiter = dlock::test::register_queued_waiter_role();

TEST(FairMutexFault, PausedHeadNeverAcceptsAStaleGrant) {
    ASSERT_TRUE(queued_waiter);
    dlock::test::paused_head_never_accepts_a_stale_grant("fair");
}

TEST(FairMutexFault, LostReplyToTheFirstAcquireLeavesTheLockFree) {
    dlock::test::lost_first_reply_leaves_nothing("fair", false);
}

TEST(FairMutexFault, LostReplyToTheFirstAcquireLeavesNoQueueEntry) {
    dlock::test::lost_first_reply_leaves_nothing("fair", true);
}

}  // namespace
