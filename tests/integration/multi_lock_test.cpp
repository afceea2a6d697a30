// dlock::multi_lock on two real redis-servers (one client each, so two backends): exclusion of a
// two-server critical section across threads that list the parts in opposite orders, no deadlock
// between overlapping sets (a dining-philosophers cycle), rollback of a partial acquisition on
// contention and on a server outage, both parts freed after kill -9 of a holding process, loss of
// one part seen through lost_token, and std::unique_lock / std::scoped_lock / std::lock.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::lock_part;
using dlock::lock_state;
using dlock::multi_lock;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;
using steady = std::chrono::steady_clock;

// The second server of this binary: started on first use, killed at exit (like shared_redis()).
dlock::test::redis_server& second_redis() {
    static dlock::test::redis_server server;
    return server;
}

dlock::redis::client make_client(const std::string& url) {
    return dlock::redis::client({.url = url});
}

bool key_exists(dlock::redis::client& c, const std::string& name) {
    return c.command({"EXISTS", c.lock_key(name)}).integer == 1;
}

long long read_counter(dlock::redis::client& c, const std::string& key) {
    const auto r = c.command({"GET", key});
    return r.is_nil() ? 0 : std::stoll(r.text);
}

// Each thread runs its own multi_lock over {A on server 1, B on server 2}; half list A first, half
// B first. Both counters are read-modify-written non-atomically inside the critical section, so
// any overlap of two holders loses an increment; a deadlock would show as a failed bounded wait.
TEST(MultiLockRedis, ExclusionAcrossTwoServersWhateverTheListedOrder) {
    auto one = make_client(shared_redis().url());
    auto two = make_client(second_redis().url());
    const auto a = unique_name("a"), b = unique_name("b");
    const auto count_a = unique_name("count"), count_b = unique_name("count");
    constexpr int threads = 4, rounds = 25;
    std::atomic<int> inside{0}, overlaps{0}, timeouts{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            multi_lock m(t % 2 == 0 ? std::vector<lock_part>{{one, a}, {two, b}}
                                    : std::vector<lock_part>{{two, b}, {one, a}},
                         {.lease = 10s});
            for (int i = 0; i < rounds; ++i) {
                if (!m.try_lock_for(scaled(20s))) {
                    ++timeouts;
                    return;
                }
                if (inside.fetch_add(1) != 0) ++overlaps;
                one.command({"SET", count_a, std::to_string(read_counter(one, count_a) + 1)});
                two.command({"SET", count_b, std::to_string(read_counter(two, count_b) + 1)});
                inside.fetch_sub(1);
                m.unlock();
            }
        });
    }
    for (auto& w : workers) w.join();
    EXPECT_EQ(timeouts.load(), 0) << "a bounded wait ran out: deadlock or starvation";
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_EQ(read_counter(one, count_a), threads * rounds);
    EXPECT_EQ(read_counter(two, count_b), threads * rounds);
    EXPECT_FALSE(key_exists(one, a));
    EXPECT_FALSE(key_exists(two, b));
}

// Three overlapping sets forming a cycle if taken as listed (A then B, B then C, C then A): the
// classic deadlock. Taken in the global order, every thread finishes every round.
TEST(MultiLockRedis, OverlappingSetsListedInACycleNeverDeadlock) {
    auto one = make_client(shared_redis().url());
    auto two = make_client(second_redis().url());
    const auto a = unique_name("a"), b = unique_name("b"), c = unique_name("c");
    const std::vector<std::vector<lock_part>> sets = {
        {{one, a}, {two, b}},
        {{two, b}, {one, c}},
        {{one, c}, {one, a}},
    };
    constexpr int rounds = 20;
    std::atomic<int> done{0}, timeouts{0};
    std::vector<std::thread> workers;
    for (const auto& set : sets) {
        workers.emplace_back([&, set] {
            multi_lock m(set, {.lease = 10s});
            for (int i = 0; i < rounds; ++i) {
                if (!m.try_lock_for(scaled(20s))) {
                    ++timeouts;
                    return;
                }
                std::this_thread::sleep_for(1ms);  // hold it long enough for the others to queue
                m.unlock();
            }
            ++done;
        });
    }
    for (auto& w : workers) w.join();
    EXPECT_EQ(timeouts.load(), 0);
    EXPECT_EQ(done.load(), 3);
}

// B is held by someone else: the multi_lock takes A (A sorts first), waits for B until the
// deadline, then releases A. Another client can take A right after.
TEST(MultiLockRedis, ContendedPartRollsBackThePartsTaken) {
    auto one = make_client(shared_redis().url());
    auto two = make_client(second_redis().url());
    auto other_one = make_client(shared_redis().url());
    auto other_two = make_client(second_redis().url());
    const auto a = unique_name("a"), b = unique_name("b");
    auto b_holder = other_two.acquire(b, {.wait = 0s});

    multi_lock m({{two, b}, {one, a}});
    const auto start = steady::now();
    EXPECT_FALSE(m.try_lock_for(scaled(300ms)));
    const auto waited = steady::now() - start;
    EXPECT_GE(waited, scaled(300ms)) << "never early";
    EXPECT_LT(waited, scaled(300ms) + scaled(1500ms)) << "late by at most the tolerance";
    EXPECT_FALSE(key_exists(one, a)) << "A was released when B timed out";
    std::error_code ec;
    auto a_grant = other_one.acquire(a, {.wait = 0s}, ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(a_grant);
    a_grant = dlock::lease();

    EXPECT_FALSE(m.try_lock()) << "one attempt per part";
    EXPECT_FALSE(key_exists(one, a));
    EXPECT_EQ(m.state(), lock_state::lost);
    EXPECT_TRUE(key_exists(two, b)) << "the other holder's lock is untouched";

    b_holder.release();
    ASSERT_TRUE(m.try_lock_for(scaled(2s)));
    EXPECT_TRUE(key_exists(one, a));
    EXPECT_TRUE(key_exists(two, b));
    m.unlock();
    EXPECT_FALSE(key_exists(one, a));
    EXPECT_FALSE(key_exists(two, b));
}

// A waiter on B gets B as soon as its holder releases it, still inside one overall deadline.
TEST(MultiLockRedis, WaitsForAReleasedPartWithinTheDeadline) {
    auto one = make_client(shared_redis().url());
    auto two = make_client(second_redis().url());
    auto other_two = make_client(second_redis().url());
    const auto a = unique_name("a"), b = unique_name("b");
    auto b_holder = other_two.acquire(b, {.wait = 0s});
    std::thread releaser([&] {
        std::this_thread::sleep_for(scaled(200ms));
        b_holder.release();
    });
    multi_lock m({{one, a}, {two, b}});
    EXPECT_TRUE(m.try_lock_for(scaled(5s)));
    releaser.join();
    EXPECT_EQ(m.state(), lock_state::held);
}

// A server that is down: the part on it fails with a backend error, which throws (try_* do not
// turn it into false), and the part already taken on the healthy server is released.
TEST(MultiLockRedis, ServerDownThrowsAndLeavesNothingHeld) {
    dlock::test::redis_server doomed;
    auto healthy = make_client(shared_redis().url());
    auto down = dlock::redis::client(
        {.url = doomed.url(), .connect_timeout = scaled(300ms), .command_timeout = scaled(300ms)});
    const auto a = unique_name("a"), b = unique_name("b");
    doomed.stop();

    multi_lock m({{down, b}, {healthy, a}});  // a on the healthy server is taken first
    for (int which = 0; which < 3; ++which) {
        try {
            switch (which) {
                case 0: m.lock(); break;
                case 1: (void)m.try_lock(); break;
                case 2: (void)m.try_lock_for(scaled(1s)); break;
            }
            FAIL() << "call " << which << " did not throw";
        } catch (const dlock::error& e) {
            EXPECT_EQ(e.code(), dlock::errc::connection_failed) << e.what();
            EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << e.what();
        }
        EXPECT_FALSE(key_exists(healthy, a)) << which;
        EXPECT_EQ(m.state(), lock_state::lost);
    }
    // Once the server is back, the same multi_lock works.
    doomed.start();
    EXPECT_TRUE(m.try_lock_for(scaled(2s)));
    EXPECT_TRUE(key_exists(healthy, a));
    EXPECT_TRUE(key_exists(down, b));
}

TEST(MultiLockRedis, LostTokenFiresWhenOnePartIsLost) {
    std::mutex reports_mutex;
    std::vector<std::error_code> reports;  // guarded by reports_mutex
    auto one = make_client(shared_redis().url());
    dlock::redis::client two(
        {.url = second_redis().url(), .error_handler = [&](std::error_code ec, std::string_view) {
             std::lock_guard guard(reports_mutex);
             reports.push_back(ec);
         }});
    const auto a = unique_name("a"), b = unique_name("b");
    multi_lock m({{one, a}, {two, b}}, {.lease = scaled(900ms)});
    m.lock();
    const auto token = m.lost_token();
    std::atomic<bool> called{false};
    std::stop_callback on_lost(token, [&] { called = true; });
    two.command({"DEL", two.lock_key(b)});  // B's key vanishes behind the holder's back
    EXPECT_TRUE(eventually([&] { return token.stop_requested(); }, scaled(3s)));
    // stop_requested() turns true before the callbacks run (on the thread that requested it).
    EXPECT_TRUE(eventually([&] { return called.load(); }, scaled(3s)));
    EXPECT_EQ(m.state(), lock_state::lost);
    EXPECT_EQ(m.expires_in(), 0ms);
    EXPECT_TRUE(key_exists(one, a)) << "A is still ours until unlock()";
    m.unlock();
    EXPECT_FALSE(key_exists(one, a));
    std::lock_guard guard(reports_mutex);
    EXPECT_EQ(reports, std::vector<std::error_code>{dlock::errc::lock_lost})
        << "B's release found the key gone; it goes to B's client, unlock() does not throw";
}

TEST(MultiLockRedis, WorksWithUniqueLockScopedLockAndStdLock) {
    auto one = make_client(shared_redis().url());
    auto two = make_client(second_redis().url());
    const auto a = unique_name("a"), b = unique_name("b"), c = unique_name("c");
    multi_lock ab({{one, a}, {two, b}});
    dlock::mutex alone(two, c);
    {
        std::unique_lock lk(ab);
        EXPECT_TRUE(lk.owns_lock());
        EXPECT_TRUE(key_exists(one, a));
        EXPECT_TRUE(key_exists(two, b));
        const auto tokens = ab.fencing_tokens();
        ASSERT_EQ(tokens.size(), 2u);
        EXPECT_GT(tokens[0], 0u);
        EXPECT_GT(tokens[1], 0u);
    }
    EXPECT_FALSE(key_exists(one, a));
    EXPECT_FALSE(key_exists(two, b));
    {
        std::scoped_lock all(ab, alone);
        EXPECT_EQ(ab.state(), lock_state::held);
        EXPECT_EQ(alone.state(), lock_state::held);
    }
    EXPECT_FALSE(key_exists(one, a));
    EXPECT_FALSE(key_exists(two, c));
    std::lock(alone, ab);
    EXPECT_EQ(ab.state(), lock_state::held);
    ab.unlock();
    alone.unlock();

    multi_lock rival({{two, b}});
    std::unique_lock held(ab);
    std::unique_lock lk(rival, scaled(50ms));
    EXPECT_FALSE(lk.owns_lock());
}

// Parts of other kinds, when this backend has them: a write lock, a read lock shared with another
// reader, and permits of a semaphore. Skipped while the backend answers errc::unsupported.
TEST(MultiLockRedis, MixesKinds) {
    auto one = make_client(shared_redis().url());
    auto two = make_client(second_redis().url());
    const auto w = unique_name("w"), r = unique_name("r"), s = unique_name("s");
    multi_lock m({{one, w, {.kind = dlock::lock_kind::write}},
                  {two, r, {.kind = dlock::lock_kind::read}},
                  {two, s, {.kind = dlock::lock_kind::permits, .count = 1, .limit = 2}}});
    try {
        ASSERT_TRUE(m.try_lock_for(scaled(2s)));
    } catch (const dlock::error& e) {
        if (e.code() == dlock::errc::unsupported) GTEST_SKIP() << e.what();
        throw;
    }
    multi_lock reader({{two, r, {.kind = dlock::lock_kind::read}},
                       {two, s, {.kind = dlock::lock_kind::permits, .count = 1, .limit = 2}}});
    EXPECT_TRUE(reader.try_lock()) << "read shares and a second permit are free";
    multi_lock writer({{one, w, {.kind = dlock::lock_kind::write}}});
    EXPECT_FALSE(writer.try_lock());
    reader.unlock();
    m.unlock();
    EXPECT_TRUE(writer.try_lock());
}

// Holds {A on server 1, B on server 2} until killed. args: url1, url2, name A, name B, lease ms,
// marker key (on server 1), which gets "<token A> <token B>" once both are held.
const bool multi_holder_child = dlock::test::register_child("multi_holder", [](const std::vector<
                                                                                std::string>&
                                                                                   args) {
    dlock::redis::client one({.url = args.at(0)});
    dlock::redis::client two({.url = args.at(1)});
    multi_lock m({{one, args.at(2)}, {two, args.at(3)}},
                 {.lease = std::chrono::milliseconds(std::stoll(args.at(4)))});
    m.lock();
    const auto tokens = m.fencing_tokens();
    one.command({"SET", args.at(5), std::to_string(tokens[0]) + " " + std::to_string(tokens[1])});
    std::this_thread::sleep_for(1h);
    return 0;
});

TEST(MultiLockRedis, KilledHolderFreesBothPartsAfterTheirLease) {
    ASSERT_TRUE(multi_holder_child);
    auto one = make_client(shared_redis().url());
    auto two = make_client(second_redis().url());
    const auto a = unique_name("a"), b = unique_name("b"), marker = unique_name("marker");
    const auto lease = scaled(1500ms);
    dlock::test::child_process holder(
        "multi_holder",
        {shared_redis().url(), second_redis().url(), a, b, std::to_string(lease.count()), marker});
    ASSERT_TRUE(eventually([&] { return !one.command({"GET", marker}).is_nil(); }, 10s));
    std::uint64_t token_a = 0, token_b = 0;
    std::istringstream(one.command({"GET", marker}).text) >> token_a >> token_b;

    multi_lock m({{two, b}, {one, a}});
    EXPECT_FALSE(m.try_lock()) << "held by the child";
    std::this_thread::sleep_for(2 * lease);  // the child's watchdog keeps both alive
    EXPECT_TRUE(key_exists(one, a));
    EXPECT_TRUE(key_exists(two, b));

    holder.kill9();
    const auto killed_at = steady::now();
    ASSERT_TRUE(m.try_lock_for(lease + scaled(1s))) << "within lease + 1 s of the crash";
    EXPECT_LE(steady::now() - killed_at, lease + scaled(1s));
    const auto tokens = m.fencing_tokens();  // in this object's order: b, a
    EXPECT_GT(tokens[0], token_b);
    EXPECT_GT(tokens[1], token_a);
    m.unlock();
    EXPECT_EQ(holder.wait(5s), 128 + 9);
}

}  // namespace
