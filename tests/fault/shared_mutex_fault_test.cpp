// Crashes around dlock::shared_mutex (docs/lock-family.md): kill -9 of a reader holding a share,
// of a writer waiting in the queue, and of a writer holding the lock. Nobody releases anything:
// the crashed process's share, queue entry or write lease must run out on its own, within its
// bound, and no sooner than that bound lets it.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

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
using steady = std::chrono::steady_clock;

/// The engine's waiter liveness (src/redis/protocol.hpp): a queued writer that stops refreshing
/// its place is skipped this long after its last refresh.
constexpr auto waiter_liveness = 2000ms;

long long integer_of(const dlock::redis::reply& r) {
    if (r.is_nil()) return 0;
    return r.type == dlock::redis::reply::kind::integer ? r.integer : std::stoll(r.text);
}

/// Runs in a child: takes the lock `args[1]` in mode `args[3]` ("read", "write") with a lease of
/// `args[2]` ms, sets `args[4]` to the fencing token (after the grant) and sleeps until killed.
/// With "queued", sets the marker first and then waits for the write lock.
const bool holder_child =
    dlock::test::register_child("rw_holder", [](const std::vector<std::string>& args) {
        // args: url, lock name, lease ms, mode, marker key
        dlock::redis::client redis({.url = args.at(0), .command_timeout = 500ms});
        dlock::shared_mutex m(redis, args.at(1),
                              {.lease = std::chrono::milliseconds(std::stoll(args.at(2)))});
        const auto& mode = args.at(3);
        if (mode == "read") {
            m.lock_shared();
        } else if (mode == "write") {
            m.lock();
        } else {  // queued: announce, then wait for the write lock (the parent kills us first)
            redis.command({"SET", args.at(4), "0"});
            m.lock();
            return 20;  // granted: the parent's share should have kept us out
        }
        redis.command({"SET", args.at(4), std::to_string(m.fencing_token())});
        std::this_thread::sleep_for(120s);
        return 21;
    });

TEST(SharedMutexFault, KilledReadersShareExpiresAndAWriterGetsTheLock) {
    ASSERT_TRUE(holder_child);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    const auto lease = scaled(1500ms);
    dlock::test::child_process reader(
        "rw_holder", {shared_redis().url(), name, std::to_string(lease.count()), "read", marker});
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    const auto reader_token = integer_of(redis.command({"GET", marker}));
    dlock::shared_mutex writer(redis, name, {.lease = 10s});
    EXPECT_FALSE(writer.try_lock()) << "the reader's share is live";
    reader.kill9();
    const auto killed_at = steady::now();
    // The writer queues (readers arriving now would wait) and is granted when the share expires:
    // at most one lease after the kill (its last renewal), plus one liveness refresh period.
    ASSERT_TRUE(writer.try_lock_for(lease + waiter_liveness / 3 + scaled(1s)));
    const auto waited = steady::now() - killed_at;
    EXPECT_GE(waited, lease / 3) << "the share outlives its holder until its lease runs out";
    EXPECT_LE(waited, lease + waiter_liveness / 3 + scaled(500ms));
    EXPECT_GT(static_cast<long long>(writer.fencing_token()), reader_token);
    writer.unlock();
    EXPECT_EQ(reader.wait(5s), 128 + 9);
}

TEST(SharedMutexFault, KilledQueuedWriterStopsBlockingReadersWithinItsLiveness) {
    ASSERT_TRUE(holder_child);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    dlock::shared_mutex m(redis, name, {.lease = 10s});
    m.lock_shared();  // keeps the writer queued
    dlock::test::child_process writer("rw_holder",
                                      {shared_redis().url(), name, "10000", "queued", marker});
    ASSERT_TRUE(eventually(
        [&] {
            return integer_of(redis.command({"ZCARD", redis.lock_key(name) + ":queue"})) == 1;
        },
        10s));
    dlock::shared_mutex reader(redis, name, {.lease = 10s});
    EXPECT_FALSE(reader.try_lock_shared()) << "writer preference: a live writer waits";
    writer.kill9();
    const auto killed_at = steady::now();
    ASSERT_TRUE(reader.try_lock_shared_for(waiter_liveness + scaled(2s)));
    const auto waited = steady::now() - killed_at;
    EXPECT_LE(waited, waiter_liveness + scaled(500ms)) << "admitted once the liveness ran out";
    EXPECT_EQ(integer_of(redis.command({"ZCARD", redis.lock_key(name) + ":queue"})), 0);
    reader.unlock_shared();
    m.unlock_shared();
    EXPECT_EQ(writer.wait(5s), 128 + 9);
}

TEST(SharedMutexFault, KilledWriterHolderIsFollowedByTheNextWriterThenReaders) {
    ASSERT_TRUE(holder_child);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    const auto lease = scaled(1500ms);
    dlock::test::child_process holder(
        "rw_holder", {shared_redis().url(), name, std::to_string(lease.count()), "write", marker});
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    const auto holder_token = integer_of(redis.command({"GET", marker}));
    dlock::shared_mutex next(redis, name, {.lease = 10s});
    dlock::shared_mutex reader(redis, name, {.lease = 10s});
    EXPECT_FALSE(reader.try_lock_shared());
    holder.kill9();
    const auto killed_at = steady::now();
    ASSERT_TRUE(next.try_lock_for(lease + waiter_liveness / 3 + scaled(1s)));
    const auto waited = steady::now() - killed_at;
    EXPECT_GE(waited, lease / 3) << "not before the holder's last renewal ran out";
    EXPECT_LE(waited, lease + waiter_liveness / 3 + scaled(500ms));
    EXPECT_GT(static_cast<long long>(next.fencing_token()), holder_token);
    EXPECT_FALSE(reader.try_lock_shared());
    next.unlock();
    EXPECT_TRUE(reader.try_lock_shared()) << "no writer left: readers come in";
    reader.unlock_shared();
    EXPECT_EQ(holder.wait(5s), 128 + 9);
}

}  // namespace

namespace {

const bool queued_waiter = dlock::test::register_queued_waiter_role();

TEST(SharedMutexFault, PausedHeadWriterNeverAcceptsAStaleGrant) {
    ASSERT_TRUE(queued_waiter);
    dlock::test::paused_head_never_accepts_a_stale_grant("write");
}

TEST(SharedMutexFault, LostReplyToTheFirstWriteAcquireLeavesTheLockFree) {
    dlock::test::lost_first_reply_leaves_nothing("write", false);
}

TEST(SharedMutexFault, LostReplyToTheFirstWriteAcquireLeavesNoQueueEntry) {
    dlock::test::lost_first_reply_leaves_nothing("write", true);
}

}  // namespace
