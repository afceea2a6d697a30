// dlock::shared_mutex on one Redis server (docs/lock-family.md): writers exclude everyone (a
// counter across threads and processes, readers that never see a half-written pair), readers
// share, a writer is handed the lock when the last reader leaves, writer preference (a stream of
// readers cannot starve a writer; readers arriving after a waiting writer wait), a writer that
// gives up lets readers in at once, fencing tokens rise, and the std lock adapters work.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <shared_mutex>
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
using steady = std::chrono::steady_clock;

long long integer_of(const dlock::redis::reply& r) {
    if (r.is_nil()) return 0;
    return r.type == dlock::redis::reply::kind::integer ? r.integer : std::stoll(r.text);
}

long long waiting_writers(dlock::redis::client& redis, const std::string& name) {
    return integer_of(redis.command({"ZCARD", redis.lock_key(name) + ":queue"}));
}

/// Writes the pair (a, b) = (a + 1, b + 1) in four round trips with gaps: a reader without the
/// lock, or a second writer, sees or causes a torn pair.
void unsafe_pair_increment(dlock::redis::client& redis, const std::string& a,
                           const std::string& b) {
    const auto va = integer_of(redis.command({"GET", a}));
    const auto vb = integer_of(redis.command({"GET", b}));
    std::this_thread::sleep_for(50us);
    redis.command({"SET", a, std::to_string(va + 1)});
    std::this_thread::sleep_for(50us);
    redis.command({"SET", b, std::to_string(vb + 1)});
}

/// True when the pair reads equal (in two round trips with a gap).
bool pair_consistent(dlock::redis::client& redis, const std::string& a, const std::string& b) {
    const auto va = integer_of(redis.command({"GET", a}));
    std::this_thread::sleep_for(50us);
    const auto vb = integer_of(redis.command({"GET", b}));
    return va == vb;
}

TEST(SharedMutex, EightWriterThreadsCounterIsExactAndReadersNeverSeeATornPair) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("lock");
    const auto a = unique_name("a");
    const auto b = unique_name("b");
    std::atomic<bool> writers_done{false};
    std::atomic<int> reads{0}, torn{0};
    dlock::shared_mutex readers_lock(redis, name, {.lease = 10s});  // shared by the readers
    std::vector<std::jthread> readers;
    for (int r = 0; r < 2; ++r) {
        readers.emplace_back([&] {
            // At least one read each, even if the writers kept them out until the end.
            for (int mine = 0; !writers_done.load() || mine == 0; ++mine) {
                std::shared_lock guard(readers_lock);
                if (!pair_consistent(redis, a, b)) ++torn;
                ++reads;
            }
        });
    }
    {
        std::vector<std::jthread> writers;
        for (int t = 0; t < 8; ++t) {
            writers.emplace_back([&] {
                dlock::shared_mutex m(redis, name, {.lease = 10s});
                for (int i = 0; i < 100; ++i) {
                    std::unique_lock guard(m);
                    unsafe_pair_increment(redis, a, b);
                }
            });
        }
    }
    writers_done = true;
    readers.clear();
    EXPECT_EQ(integer_of(redis.command({"GET", a})), 800);
    EXPECT_EQ(integer_of(redis.command({"GET", b})), 800);
    EXPECT_EQ(torn.load(), 0) << "a reader saw a half-written pair";
    EXPECT_GE(reads.load(), 2);
    EXPECT_EQ(waiting_writers(redis, name), 0);
}

TEST(SharedMutex, ReadersHoldTogether) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::shared_mutex m(redis, unique_name(), {.lease = 10s});
    constexpr int n = 5;
    std::atomic<int> inside{0}, all_seen{0};
    std::mutex tokens_mutex;
    std::set<std::uint64_t> tokens;  // guarded by tokens_mutex
    {
        std::vector<std::jthread> readers;
        for (int r = 0; r < n; ++r) {
            readers.emplace_back([&] {
                std::shared_lock guard(m);
                {
                    std::lock_guard lk(tokens_mutex);
                    tokens.insert(m.fencing_token());
                }
                ++inside;
                // Every reader stays until all n are inside together: only possible if the lock
                // admits them at once.
                if (eventually([&] { return inside.load() == n; }, 10s)) ++all_seen;
                EXPECT_EQ(m.state(), dlock::lock_state::held);
            });
        }
    }
    EXPECT_EQ(all_seen.load(), n) << "the readers were not all inside at once";
    EXPECT_EQ(tokens.size(), static_cast<std::size_t>(n)) << "each share has its own token";
}

TEST(SharedMutex, WriterExcludedWhileAReaderHoldsAndHandedTheLockWhenItLeaves) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::shared_mutex reader(redis, name, {.lease = 10s});
    dlock::shared_mutex writer(redis, name, {.lease = 10s});
    reader.lock_shared();
    EXPECT_FALSE(writer.try_lock()) << "a reader holds a share";
    std::atomic<bool> granted{false};
    std::atomic<steady::rep> granted_at{0};
    std::promise<void> may_unlock;
    std::jthread waiting([&] {
        writer.lock();
        granted_at = steady::now().time_since_epoch().count();
        granted = true;
        may_unlock.get_future().wait();
        writer.unlock();  // by the thread that locked it, as with a std::shared_mutex
    });
    // Queued and listening on its hand-off channel (<release channel>:<its token>)...
    ASSERT_TRUE(eventually(
        [&] {
            return waiting_writers(redis, name) == 1 &&
                   redis.command({"PUBSUB", "CHANNELS", redis.release_channel(name) + ":*"})
                           .elements.size() == 1;
        },
        5s));
    // ...and past the re-check it makes right after subscribing, so from now on only the
    // release's hand-off (or its next liveness refresh, 667 ms away) can grant it.
    std::this_thread::sleep_for(scaled(50ms));
    EXPECT_FALSE(granted.load());
    const auto released_at = steady::now();
    reader.unlock_shared();
    ASSERT_TRUE(eventually([&] { return granted.load(); }, 5s));
    // Handed over by the release script: far sooner than the 10 s lease, and sooner than the
    // waiter's next liveness refresh would find it.
    EXPECT_LT(steady::time_point(steady::duration(granted_at.load())) - released_at,
              std::min<std::chrono::milliseconds>(scaled(200ms), 400ms));
    EXPECT_EQ(writer.state(), dlock::lock_state::held);
    EXPECT_FALSE(reader.try_lock_shared()) << "the writer holds it";
    may_unlock.set_value();
    waiting.join();
    EXPECT_TRUE(reader.try_lock_shared());
    reader.unlock_shared();
}

TEST(SharedMutex, StreamOfReadersDoesNotStarveAWriter) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::shared_mutex readers_lock(redis, name, {.lease = 10s});
    std::atomic<bool> stop{false}, writer_inside{false};
    std::atomic<int> inside{0}, reads{0}, overlaps{0};
    std::vector<std::jthread> readers;
    for (int r = 0; r < 4; ++r) {
        readers.emplace_back([&] {
            while (!stop.load()) {
                std::shared_lock guard(readers_lock);
                if (writer_inside.load()) ++overlaps;
                ++inside;
                ++reads;
                std::this_thread::sleep_for(20ms);  // 4 readers of 20 ms: always someone inside
                --inside;
            }
        });
    }
    ASSERT_TRUE(eventually([&] { return reads.load() >= 20; }, 10s));
    dlock::shared_mutex writer(redis, name, {.lease = 10s});
    const auto asked = steady::now();
    ASSERT_TRUE(writer.try_lock_for(scaled(3s))) << "starved by the readers";
    const auto waited = steady::now() - asked;
    writer_inside = true;
    EXPECT_EQ(inside.load(), 0) << "a reader is inside with the writer";
    const int reads_at_grant = reads.load();
    std::this_thread::sleep_for(scaled(100ms));
    EXPECT_EQ(reads.load(), reads_at_grant) << "readers kept coming in while the writer held it";
    writer_inside = false;
    writer.unlock();
    EXPECT_TRUE(eventually([&] { return reads.load() > reads_at_grant; }, 5s))
        << "readers resume after the writer";
    stop = true;
    readers.clear();
    EXPECT_EQ(overlaps.load(), 0);
    // The current shares drain in one hold time (20 ms): far below the 10 s lease.
    EXPECT_LT(waited, scaled(1s));
}

TEST(SharedMutex, ReaderArrivingAfterAWaitingWriterWaitsForIt) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::shared_mutex m(redis, name, {.lease = 10s});
    m.lock_shared();
    dlock::shared_mutex writer(redis, name, {.lease = 10s});
    std::atomic<bool> writer_done{false};
    std::jthread w([&] {
        std::unique_lock guard(writer);
        std::this_thread::sleep_for(scaled(100ms));
        writer_done = true;
    });
    ASSERT_TRUE(eventually([&] { return waiting_writers(redis, name) == 1; }, 5s));
    std::atomic<bool> late_reader_in{false}, late_reader_saw_writer_done{false};
    std::jthread late([&] {
        if (m.try_lock_shared()) {
            ADD_FAILURE() << "writer preference: a writer waits, so a new reader must too";
            m.unlock_shared();
        }
        ASSERT_TRUE(m.try_lock_shared_for(scaled(5s)));
        late_reader_saw_writer_done = writer_done.load();
        late_reader_in = true;
        m.unlock_shared();
    });
    std::this_thread::sleep_for(scaled(50ms));
    EXPECT_FALSE(late_reader_in.load());
    m.unlock_shared();  // the last share: the writer gets it, then the late reader
    w.join();
    late.join();
    EXPECT_TRUE(late_reader_in.load());
    EXPECT_TRUE(late_reader_saw_writer_done.load()) << "the late reader went before the writer";
}

TEST(SharedMutex, WriterThatGivesUpLetsReadersInAtOnce) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::shared_mutex m(redis, name, {.lease = 10s});
    m.lock_shared();
    std::atomic<steady::rep> reader_in_at{0};
    std::atomic<bool> writer_gave_up{false};
    std::jthread waiting_reader;
    {
        dlock::shared_mutex writer(redis, name, {.lease = 10s});
        std::jthread w([&] {
            EXPECT_FALSE(writer.try_lock_for(scaled(600ms)));
            writer_gave_up = true;
        });
        ASSERT_TRUE(eventually([&] { return waiting_writers(redis, name) == 1; }, 5s));
        // A reader that arrives while the writer waits must wait...
        waiting_reader = std::jthread([&] {
            if (m.try_lock_shared()) {
                ADD_FAILURE() << "a reader got in while a writer waited";
                m.unlock_shared();
            }
            ASSERT_TRUE(m.try_lock_shared_for(scaled(10s)));
            reader_in_at = steady::now().time_since_epoch().count();
            m.unlock_shared();
        });
        w.join();
    }
    const auto gave_up_at = steady::now();
    EXPECT_TRUE(writer_gave_up.load());
    EXPECT_EQ(waiting_writers(redis, name), 0) << "the writer left the queue";
    // ...and is let in as soon as the writer leaves, not after some re-check period.
    ASSERT_TRUE(eventually([&] { return reader_in_at.load() != 0; }, 5s));
    EXPECT_LT(steady::time_point(steady::duration(reader_in_at.load())) - gave_up_at,
              scaled(300ms));
    waiting_reader.join();
    dlock::shared_mutex other(redis, name, {.lease = 10s});
    EXPECT_TRUE(other.try_lock_shared());
    other.unlock_shared();
    m.unlock_shared();
}

TEST(SharedMutex, TryLockSharedForTimesOutWhileAWriterHolds) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::shared_mutex writer(redis, name, {.lease = 10s});
    writer.lock();
    dlock::shared_mutex reader(redis, name, {.lease = 10s});
    const auto start = steady::now();
    EXPECT_FALSE(reader.try_lock_shared_for(scaled(300ms)));
    const auto took = steady::now() - start;
    EXPECT_GE(took, scaled(300ms)) << "never early";
    EXPECT_LT(took, scaled(300ms) + scaled(1s));
    EXPECT_FALSE(reader.try_lock_shared_until(steady::now() - 1s)) << "past deadline: one attempt";
    EXPECT_FALSE(reader.try_lock_for(-5s));
    EXPECT_THROW((void)reader.fencing_token(), dlock::error);
    writer.unlock();
    EXPECT_TRUE(reader.try_lock_shared_until(std::chrono::system_clock::now() + scaled(2s)));
    reader.unlock_shared();
}

TEST(SharedMutex, FencingTokensRiseAcrossReadersAndWriters) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::shared_mutex m(redis, unique_name(), {.lease = 10s});
    std::uint64_t last = 0;
    for (int i = 0; i < 3; ++i) {
        m.lock_shared();
        const auto read = m.fencing_token();
        EXPECT_GT(read, last);
        m.unlock_shared();
        m.lock();
        const auto write = m.fencing_token();
        EXPECT_GT(write, read);
        EXPECT_GT(m.expires_in(), 5s);
        m.unlock();
        last = write;
    }
    EXPECT_THROW((void)m.fencing_token(), dlock::error);
    EXPECT_EQ(m.state(), dlock::lock_state::lost);
    EXPECT_TRUE(m.lost_token().stop_requested());
}

TEST(SharedMutex, StdAdaptersWork) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::shared_mutex m(redis, name, {.lease = 10s});
    dlock::shared_mutex other(redis, name, {.lease = 10s});
    {
        std::unique_lock guard(m);
        EXPECT_TRUE(guard.owns_lock());
        EXPECT_FALSE(other.try_lock_shared());
        std::stop_token lost = m.lost_token();
        EXPECT_FALSE(lost.stop_requested());
        guard.unlock();
        EXPECT_TRUE(lost.stop_requested()) << "fires on release";
    }
    {
        std::shared_lock guard(m);
        std::shared_lock<dlock::shared_mutex> second(other, std::try_to_lock);
        EXPECT_TRUE(second.owns_lock()) << "two readers";
        std::unique_lock<dlock::shared_mutex> writer(other, std::defer_lock);
        EXPECT_THROW(writer.lock(), dlock::error) << "this thread holds a share of `other`";
        second.unlock();
        EXPECT_FALSE(writer.try_lock_for(scaled(100ms))) << "`m` still has a share";
    }
    {
        std::shared_lock<dlock::shared_mutex> timed(m, scaled(1s));
        EXPECT_TRUE(timed.owns_lock());
        EXPECT_THROW(m.lock_shared(), dlock::error) << "a second share of one thread";
    }
    {
        std::scoped_lock guard(m);
        EXPECT_EQ(m.state(), dlock::lock_state::held);
    }
    EXPECT_TRUE(other.try_lock());
    other.unlock();
    EXPECT_THROW(dlock::shared_mutex(redis, ""), dlock::error);
}

}  // namespace

namespace {

TEST(SharedMutex, WriterHandOffValidityIsCappedByTheOwnLease) {
    dlock::test::handoff_validity_is_capped("write", {.lease = 1s}, 1s);
}

TEST(SharedMutex, WriterHandOffValidityIsCappedByMaxHold) {
    dlock::test::handoff_validity_is_capped("write", {.lease = 30s, .max_hold = 1s}, 1s);
}

TEST(SharedMutex, KeysOfAnUnusedNameExpire) { dlock::test::keys_of_an_unused_name_expire("write"); }

TEST(SharedMutex, WriterRefreshCostDoesNotGrowWithTheQueue) {
    dlock::test::refresh_cost_does_not_grow_with_the_queue("write");
}

}  // namespace
