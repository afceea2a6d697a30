// dlock::counting_semaphore on one Redis server: at most N holders at once across threads and
// processes (a server-side gauge records the peak), k-permit grants woken by releases and by
// set_permits, timeouts, fencing tokens, observers, bad input and type clashes with dlock::mutex.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
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
using steady = std::chrono::steady_clock;

/// A server-side gauge of how many holders are inside, and the peak it reached: correct across
/// processes, because each step is one atomic script.
struct gauge {
    std::string inside = unique_name("inside");
    std::string peak = unique_name("peak");
    std::string entries = unique_name("entries");

    void enter(dlock::redis::client& redis) const {
        static const std::string script =
            "local v = redis.call('INCR', KEYS[1]) redis.call('INCR', KEYS[3]) "
            "if v > tonumber(redis.call('GET', KEYS[2]) or '0') then "
            "redis.call('SET', KEYS[2], v) end return v";
        redis.command({"EVAL", script, "3", inside, peak, entries});
    }
    void leave(dlock::redis::client& redis) const { redis.command({"DECR", inside}); }
    static long long read(dlock::redis::client& redis, const std::string& key) {
        const auto r = redis.command({"GET", key});
        return r.is_nil() ? 0 : std::stoll(r.text);
    }
};

/// Holds the semaphore's permits while inside the gauge for a moment, `rounds` times.
void use(dlock::redis::client& redis, dlock::counting_semaphore& sem, const gauge& g, int rounds) {
    for (int i = 0; i < rounds; ++i) {
        sem.acquire();
        g.enter(redis);
        std::this_thread::sleep_for(500us);
        g.leave(redis);
        sem.release();
    }
}

/// True once `n` clients wait on the semaphore's release channel.
bool waiters_subscribed(dlock::redis::client& redis, const std::string& name, int n) {
    const auto r = redis.command({"PUBSUB", "NUMSUB", redis.release_channel(name)});
    return r.elements.size() == 2 && r.elements[1].integer >= n;
}

template <class F>
dlock::errc error_of(F&& f) {
    try {
        f();
    } catch (const dlock::error& e) {
        return static_cast<dlock::errc>(e.code().value());
    }
    return dlock::errc{};
}

TEST(Semaphore, EightThreadsNeverMoreThanThreeInside) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const gauge g;
    std::vector<std::jthread> workers;
    for (int t = 0; t < 8; ++t) {
        workers.emplace_back([&] {
            dlock::counting_semaphore sem(redis, name, 3, {.lease = 10s});  // one object per thread
            use(redis, sem, g, 50);
        });
    }
    workers.clear();
    EXPECT_EQ(gauge::read(redis, g.entries), 8 * 50);
    EXPECT_LE(gauge::read(redis, g.peak), 3);
    EXPECT_EQ(gauge::read(redis, g.peak), 3) << "with 8 contenders all 3 permits get used";
}

TEST(Semaphore, ThreadsSharingOneObject) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::counting_semaphore sem(redis, unique_name(), 2, {.lease = 10s});
    const gauge g;
    std::vector<std::jthread> workers;
    for (int t = 0; t < 4; ++t) workers.emplace_back([&] { use(redis, sem, g, 25); });
    workers.clear();
    EXPECT_EQ(gauge::read(redis, g.entries), 4 * 25);
    EXPECT_LE(gauge::read(redis, g.peak), 2);
    EXPECT_EQ(sem.held(), 0u);
}

const bool gauge_child =
    dlock::test::register_child("semaphore_gauge", [](const std::vector<std::string>& args) {
        // args: url, semaphore name, permits, inside key, peak key, entries key, rounds, go key
        dlock::redis::client redis({.url = args.at(0)});
        dlock::counting_semaphore sem(
            redis, args.at(1), static_cast<std::uint32_t>(std::stoul(args.at(2))), {.lease = 10s});
        const gauge g{args.at(3), args.at(4), args.at(5)};
        // Start together (process start-up is slower than a round): wait for the parent's go.
        redis.command({"INCR", args.at(7) + ":ready"});
        const auto deadline = steady::now() + 30s;
        while (redis.command({"GET", args.at(7)}).is_nil()) {
            if (steady::now() > deadline) return 20;
            std::this_thread::sleep_for(1ms);
        }
        use(redis, sem, g, std::stoi(args.at(6)));
        return 0;
    });

TEST(Semaphore, ThreeProcessesLimitTwo) {
    ASSERT_TRUE(gauge_child);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const gauge g;
    const auto go = unique_name("go");
    constexpr int rounds = 40;
    std::vector<std::unique_ptr<dlock::test::child_process>> children;
    for (int p = 0; p < 3; ++p) {
        children.push_back(std::make_unique<dlock::test::child_process>(
            "semaphore_gauge",
            std::vector<std::string>{shared_redis().url(), name, "2", g.inside, g.peak, g.entries,
                                     std::to_string(rounds), go}));
    }
    ASSERT_TRUE(eventually([&] { return gauge::read(redis, go + ":ready") == 3; }, 20s));
    redis.command({"SET", go, "1"});
    for (auto& child : children) EXPECT_EQ(child->wait(scaled(60s)), 0);
    EXPECT_EQ(gauge::read(redis, g.entries), 3 * rounds);
    EXPECT_LE(gauge::read(redis, g.peak), 2);
    EXPECT_EQ(gauge::read(redis, g.peak), 2);
}

TEST(Semaphore, WaiterForTwoIsWokenByARelease) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::counting_semaphore holder(redis, name, 3, {.lease = 30s});
    holder.acquire();
    holder.acquire();  // two grants of 1: 1 permit left
    std::atomic<bool> granted{false};
    std::atomic<steady::rep> granted_at{0};
    dlock::counting_semaphore waiter(redis, name, 3, {.lease = 30s});
    std::jthread t([&] {
        waiter.acquire(2);
        granted_at = steady::now().time_since_epoch().count();
        granted = true;
    });
    ASSERT_TRUE(eventually([&] { return waiters_subscribed(redis, name, 1); }, 5s));
    EXPECT_FALSE(granted.load()) << "2 permits wanted, 1 free";
    dlock::counting_semaphore probe(redis, name, 3);
    EXPECT_FALSE(probe.try_acquire(2));
    const auto released_at = steady::now();
    holder.release();  // now 2 free
    ASSERT_TRUE(eventually([&] { return granted.load(); }, 5s));
    t.join();
    const auto latency = steady::time_point(steady::duration(granted_at.load())) - released_at;
    EXPECT_LT(latency, scaled(1s)) << "woken by the release's notification, not by a 30 s lease";
    EXPECT_EQ(waiter.held(), 2u);
    EXPECT_EQ(holder.held(), 1u);
    EXPECT_GT(waiter.fencing_token(), holder.fencing_token());
}

TEST(Semaphore, TryAcquireForTimesOut) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::counting_semaphore holder(redis, name, 1);
    ASSERT_TRUE(holder.try_acquire());
    dlock::counting_semaphore other(redis, name, 1);
    EXPECT_FALSE(other.try_acquire());
    const auto timeout = scaled(300ms);
    const auto start = steady::now();
    EXPECT_FALSE(other.try_acquire_for(timeout));
    const auto waited = steady::now() - start;
    EXPECT_GE(waited, timeout) << "never early";
    EXPECT_LT(waited, timeout + scaled(1s));
    EXPECT_FALSE(other.try_acquire_until(std::chrono::system_clock::now() - 1s))
        << "a past deadline is one attempt";
    EXPECT_EQ(other.held(), 0u);
    holder.release();
    EXPECT_TRUE(other.try_acquire_for(-5s)) << "a negative timeout is one attempt";
}

TEST(Semaphore, RaisingThePermitsWakesAWaiter) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::counting_semaphore holder(redis, name, 1, {.lease = 30s});
    holder.acquire();
    std::atomic<bool> granted{false};
    dlock::counting_semaphore waiter(redis, name, 1, {.lease = 30s});
    std::jthread t([&] {
        waiter.acquire();
        granted = true;
    });
    ASSERT_TRUE(eventually([&] { return waiters_subscribed(redis, name, 1); }, 5s));
    EXPECT_FALSE(granted.load());
    const auto raised_at = steady::now();
    holder.set_permits(2);
    EXPECT_EQ(holder.max(), 2u);
    ASSERT_TRUE(eventually([&] { return granted.load(); }, 5s));
    EXPECT_LT(steady::now() - raised_at, scaled(1s)) << "woken by set_permits, not by a lease";
    t.join();
    EXPECT_EQ(holder.held(), 1u) << "the first holder keeps its permit";
    EXPECT_EQ(holder.state(), dlock::lock_state::held);
    EXPECT_EQ(redis.command({"GET", redis.lock_key(name) + ":limit"}).text, "2");
}

TEST(Semaphore, LoweringThePermitsBlocksNewAcquirersUntilEnoughAreReleased) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::counting_semaphore holder(redis, name, 3);
    for (int i = 0; i < 3; ++i) holder.acquire();
    holder.set_permits(1);
    EXPECT_EQ(holder.held(), 3u) << "held permits stay held";
    EXPECT_EQ(holder.state(), dlock::lock_state::held);
    dlock::counting_semaphore other(redis, name, 1);
    holder.release();
    EXPECT_FALSE(other.try_acquire()) << "2 held, 1 permit";
    holder.release();
    EXPECT_FALSE(other.try_acquire()) << "1 held, 1 permit";
    holder.release();
    EXPECT_TRUE(other.try_acquire());
    dlock::counting_semaphore third(redis, name, 3);  // its 3 is not applied: a number is set
    EXPECT_FALSE(third.try_acquire());
}

TEST(Semaphore, FencingTokensRise) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::counting_semaphore a(redis, name, 2);
    dlock::counting_semaphore b(redis, name, 2);
    std::uint64_t last = 0;
    for (int i = 0; i < 5; ++i) {
        a.acquire();
        b.acquire();  // two holders at once get distinct, rising tokens
        EXPECT_GT(a.fencing_token(), last);
        EXPECT_GT(b.fencing_token(), a.fencing_token());
        last = b.fencing_token();
        a.release();
        b.release();
    }
    a.acquire();
    a.acquire();
    const auto latest = a.fencing_token();
    a.release();
    EXPECT_LT(a.fencing_token(), latest) << "the most recent grant left first (LIFO)";
    a.release();
    EXPECT_EQ(error_of([&] { (void)a.fencing_token(); }), dlock::errc::not_owner);
}

TEST(Semaphore, KPermitGrantsAndWholeGrantRelease) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::counting_semaphore sem(redis, name, 4);
    sem.acquire(2);
    EXPECT_TRUE(sem.try_acquire(1));
    EXPECT_EQ(sem.held(), 3u);
    dlock::counting_semaphore other(redis, name, 4);
    EXPECT_FALSE(other.try_acquire(2));
    EXPECT_TRUE(other.try_acquire(1));
    other.release();
    // release(2) would split the grant of 2 (after the most recent grant of 1): refused, nothing
    // released.
    EXPECT_EQ(error_of([&] { sem.release(2); }), dlock::errc::invalid_argument);
    EXPECT_EQ(sem.held(), 3u);
    EXPECT_EQ(error_of([&] { sem.release(4); }), dlock::errc::not_owner);
    EXPECT_EQ(sem.held(), 3u);
    std::error_code ec;
    sem.release(5, ec);
    EXPECT_EQ(ec, dlock::errc::not_owner);
    sem.release(0);  // nothing, like std
    EXPECT_EQ(sem.held(), 3u);
    sem.release(3);
    EXPECT_EQ(sem.held(), 0u);
    EXPECT_TRUE(other.try_acquire(4)) << "every permit came back";
}

TEST(Semaphore, BadInput) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    EXPECT_EQ(error_of([&] { dlock::counting_semaphore s(redis, name, 0); }),
              dlock::errc::invalid_argument);
    EXPECT_EQ(error_of([&] { dlock::counting_semaphore s(redis, "", 1); }),
              dlock::errc::invalid_argument);
    EXPECT_EQ(error_of([&] { dlock::counting_semaphore s(redis, name, 1, {.lease = 1ms}); }),
              dlock::errc::invalid_argument);
    dlock::counting_semaphore sem(redis, name, 2);
    EXPECT_EQ(error_of([&] { sem.acquire(0); }), dlock::errc::invalid_argument);
    EXPECT_EQ(error_of([&] { (void)sem.try_acquire(3); }), dlock::errc::invalid_argument);
    EXPECT_EQ(error_of([&] { (void)sem.try_acquire_for(1s, 0); }), dlock::errc::invalid_argument);
    EXPECT_EQ(error_of([&] { sem.release(); }), dlock::errc::not_owner);
    EXPECT_EQ(error_of([&] { sem.set_permits(0); }), dlock::errc::invalid_argument);
    EXPECT_EQ(sem.max(), 2u);
    EXPECT_EQ(sem.held(), 0u);
    // The backend checks the request too.
    std::error_code ec;
    auto grant = redis.acquire_until(
        name, {.kind = dlock::lock_kind::permits, .count = 3, .limit = 2}, {}, steady::now(), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_FALSE(grant);
}

TEST(Semaphore, NameOfAPlainMutexIsWrongType) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    {
        dlock::mutex m(redis, name);
        std::scoped_lock guard(m);
        dlock::counting_semaphore sem(redis, name, 2);
        EXPECT_EQ(error_of([&] { (void)sem.try_acquire(); }), dlock::errc::unexpected_reply);
        EXPECT_EQ(error_of([&] { sem.set_permits(3); }), dlock::errc::unexpected_reply);
        EXPECT_EQ(sem.held(), 0u);
    }
    // And the other way round: a mutex on a name whose permits are held.
    dlock::counting_semaphore sem(redis, name, 2);
    sem.acquire();
    dlock::mutex m(redis, name);
    EXPECT_EQ(error_of([&] { (void)m.try_lock(); }), dlock::errc::unexpected_reply);
}

TEST(Semaphore, ObserversAndLostToken) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::counting_semaphore sem(redis, name, 3, {.lease = 10s});
    EXPECT_EQ(sem.state(), dlock::lock_state::lost);
    EXPECT_EQ(sem.expires_in(), 0ms);
    EXPECT_TRUE(sem.lost_token().stop_requested()) << "nothing held";
    sem.acquire();
    sem.acquire();
    EXPECT_EQ(sem.state(), dlock::lock_state::held);
    EXPECT_GT(sem.expires_in(), 5s);
    EXPECT_LE(sem.expires_in(), 10s);
    const auto token = sem.lost_token();
    EXPECT_FALSE(token.stop_requested());
    sem.release();
    EXPECT_FALSE(token.stop_requested()) << "a partial release is not a loss";
    sem.release();
    EXPECT_TRUE(token.stop_requested()) << "fires when the last permit is given back";
    sem.acquire();
    EXPECT_FALSE(sem.lost_token().stop_requested()) << "a new holding period";
    sem.release();
}

TEST(Semaphore, LostTokenFiresWhenAGrantIsLost) {
    std::atomic<int> errors{0};
    dlock::redis::client redis(
        {.url = shared_redis().url(),
         .error_handler = [&](std::error_code, std::string_view) { ++errors; }});
    const auto name = unique_name();
    const auto lease = scaled(900ms);
    dlock::counting_semaphore sem(redis, name, 3, {.lease = lease});
    sem.acquire();
    sem.acquire(2);
    const auto token = sem.lost_token();
    // Someone removes every grant behind our back: the watchdog's next renewal finds ours gone.
    redis.command({"DEL", redis.lock_key(name), redis.lock_key(name) + ":counts"});
    ASSERT_TRUE(eventually([&] { return token.stop_requested(); }, lease + scaled(1s)));
    EXPECT_EQ(sem.state(), dlock::lock_state::lost);
    EXPECT_EQ(sem.held(), 3u) << "still to be given back by release()";
    sem.release(2);
    sem.release(1);
    EXPECT_EQ(sem.held(), 0u);
    EXPECT_GE(errors.load(), 1) << "releasing a lost grant is reported to the error handler";
}

TEST(Semaphore, DestructorReleasesEverything) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    {
        dlock::counting_semaphore sem(redis, name, 3);
        sem.acquire(2);
        sem.acquire();
    }
    dlock::counting_semaphore other(redis, name, 3);
    EXPECT_TRUE(other.try_acquire(3));
}

}  // namespace
