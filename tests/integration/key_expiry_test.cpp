// A lock name's keys on Redis go once the name is unused (client_options::idle_expiry), and its
// fencing tokens still rise across that expiry (docs/redis-lock.md, "Fencing tokens and key
// expiry"): every kind, on one server and on Redlock. Also a semaphore used with another number
// of permits than the server records: the client's error handler is told both numbers.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

/// The idle period of these tests: short, so the keys go within the test. The leases are short
/// too, since the counter is kept at least as long as the lease of its latest grant.
constexpr auto idle = 300ms;
constexpr auto lease = 1s;
/// Redlock's bound per server and attempt: the default for a 1 s lease (5 ms) is too tight for a
/// loaded test machine (a first EVAL, a scheduling delay) and would fail an attempt for no reason.
std::chrono::milliseconds node_timeout() { return scaled(200ms); }

/// Takes and releases `name` once with each lock kind's object `kind` names, and returns the
/// fencing token of that grant.
std::uint64_t lock_once(dlock::backend& backend, const std::string& kind, const std::string& name) {
    const dlock::lock_options o{.lease = lease};
    if (kind == "mutex") {
        dlock::mutex m(backend, name, o);
        std::lock_guard lk(m);
        return m.fencing_token();
    }
    if (kind == "recursive_mutex") {
        dlock::recursive_mutex m(backend, name, o);
        std::lock_guard lk(m);
        return m.fencing_token();
    }
    if (kind == "fair_mutex") {
        dlock::fair_mutex m(backend, name, o);
        std::lock_guard lk(m);
        return m.fencing_token();
    }
    if (kind == "shared_mutex/read") {
        dlock::shared_mutex m(backend, name, o);
        std::shared_lock lk(m);
        return m.fencing_token();
    }
    if (kind == "shared_mutex/write") {
        dlock::shared_mutex m(backend, name, o);
        std::lock_guard lk(m);
        return m.fencing_token();
    }
    dlock::counting_semaphore sem(backend, name, 3, o);
    sem.acquire(2);
    const auto token = sem.fencing_token();
    sem.release(2);
    return token;
}

const std::vector<std::string>& kinds() {
    static const std::vector<std::string> all{"mutex",
                                              "recursive_mutex",
                                              "fair_mutex",
                                              "shared_mutex/read",
                                              "shared_mutex/write",
                                              "counting_semaphore"};
    return all;
}

long long dbsize(const redis_server& server) { return std::stoll(server.command({"DBSIZE"})); }

// Names locked once leave no key behind once the idle period has passed: not the fence counter,
// not a semaphore's number of permits, nothing else of any kind.
TEST(KeyExpiry, NamesLockedOnceLeaveNoKeysAfterTheIdlePeriod) {
    redis_server server;
    dlock::redis::client redis({.url = server.url(), .idle_expiry = idle});
    constexpr int names_per_kind = 20;
    for (const auto& kind : kinds()) {
        for (int i = 0; i < names_per_kind; ++i) {
            EXPECT_GT(lock_once(redis, kind, unique_name(kind)), 0u);
        }
    }
    EXPECT_GT(dbsize(server), 0) << "each name keeps its counter for the idle period";
    EXPECT_TRUE(eventually([&] { return dbsize(server) == 0; }, 10s))
        << dbsize(server) << " keys left, e.g. " << server.command({"RANDOMKEY"});
}

// The same on Redlock: every server's counter goes (the write-back keeps its own expiry).
TEST(KeyExpiry, RedlockServersKeepNoKeysAfterTheIdlePeriod) {
    redis_server a, b, c;
    dlock::redlock::client redlock(
        {.urls = {a.url(), b.url(), c.url()}, .node_timeout = node_timeout(), .idle_expiry = idle});
    for (int i = 0; i < 20; ++i) EXPECT_GT(lock_once(redlock, "mutex", unique_name("redlock")), 0u);
    for (const redis_server* s : {&a, &b, &c}) {
        EXPECT_TRUE(eventually([&] { return dbsize(*s) == 0; }, 10s))
            << s->url() << ": " << dbsize(*s) << " keys left, e.g. " << s->command({"RANDOMKEY"});
    }
}

// A name locked again after its keys expired gets a higher token than every earlier grant.
TEST(KeyExpiry, TokensRiseAcrossTheCounterExpiry) {
    dlock::redis::client redis({.url = shared_redis().url(), .idle_expiry = idle});
    for (const auto& kind : kinds()) {
        SCOPED_TRACE(kind);
        const auto name = unique_name(kind);
        const auto first = lock_once(redis, kind, name);
        const auto second = lock_once(redis, kind, name);
        EXPECT_GT(second, first);
        const auto fence = redis.lock_key(name) + ":fence";
        ASSERT_TRUE(eventually(
            [&] {
                return redis.command({"EXISTS", fence}).integer == 0;
            },
            10s))
            << "the fence counter never expired";
        const auto third = lock_once(redis, kind, name);
        EXPECT_GT(third, second) << "the token went back after the counter expired";
    }
}

// Redlock: a counter that expired on every server still gives a higher token.
TEST(KeyExpiry, RedlockTokensRiseAcrossTheCounterExpiry) {
    redis_server a, b, c;
    dlock::redlock::client redlock(
        {.urls = {a.url(), b.url(), c.url()}, .node_timeout = node_timeout(), .idle_expiry = idle});
    const auto name = unique_name("redlock");
    const auto first = lock_once(redlock, "mutex", name);
    for (const redis_server* s : {&a, &b, &c}) {
        ASSERT_TRUE(eventually([&] { return dbsize(*s) == 0; }, 10s)) << s->url();
    }
    EXPECT_GT(lock_once(redlock, "mutex", name), first);
}

// A counter that went back while it existed (a Sentinel failover to a replica that missed the
// last grants, a restart from an older snapshot) still gives a higher token on one server, every
// kind: the server's clock is the token's floor (lib/fence.lua), not only a missing counter's seed.
/// For every kind: a grant, then its fence counter set to `counter(first token)` behind the
/// client's back, then `check(redis, fence key, first token, next grant's token)`.
template <class Counter, class Check>
void after_counter_set(Counter counter, Check check) {
    dlock::redis::client redis({.url = shared_redis().url(), .idle_expiry = 60s});
    for (const auto& kind : kinds()) {
        SCOPED_TRACE(kind);
        const auto name = unique_name(kind);
        const auto first = lock_once(redis, kind, name);
        const auto fence = redis.lock_key(name) + ":fence";
        redis.command({"SET", fence, std::to_string(counter(first))});
        check(redis, fence, first, lock_once(redis, kind, name));
    }
}

TEST(KeyExpiry, ACounterThatWentBackStillGivesAHigherToken) {
    // What a replica that missed the grant would hold: the counter before it.
    after_counter_set([](std::uint64_t first) { return first - 1000; },
                      [](auto&, const std::string&, std::uint64_t first, std::uint64_t next) {
                          EXPECT_GT(next, first) << "a token was handed out twice";
                      });
}

// A counter ahead of the server's clock (the clock stepped back, or a token of another server's
// clock): the grant's SET ... GET stored the clock over it, so the counter + 1 goes back in, and
// the token is that, every kind (lib/fence.lua).
TEST(KeyExpiry, ACounterAheadOfTheClockGivesCounterPlusOne) {
    constexpr std::uint64_t ahead = 1'000'000'000'000;  // 11.6 days ahead of the clock
    after_counter_set(
        [](std::uint64_t first) { return first + ahead; },
        [](dlock::redis::client& redis, const std::string& fence, std::uint64_t first,
           std::uint64_t next) {
            EXPECT_EQ(next, first + ahead + 1);
            EXPECT_EQ(redis.command({"GET", fence}).text, std::to_string(first + ahead + 1));
            EXPECT_GT(redis.command({"PTTL", fence}).integer, 0) << "the counter lost its expiry";
        });
}

// A counter left by a version without expiry (a small number, no TTL) gets one at the next grant,
// and tokens go on rising from it.
TEST(KeyExpiry, AnOldCounterWithoutExpiryGetsOne) {
    dlock::redis::client redis({.url = shared_redis().url(), .idle_expiry = 60s});
    const auto name = unique_name("old");
    const auto fence = redis.lock_key(name) + ":fence";
    redis.command({"SET", fence, "41"});
    const auto token = lock_once(redis, "mutex", name);
    EXPECT_GT(token, 41u);
    EXPECT_EQ(redis.command({"GET", fence}).text, std::to_string(token));
    const auto ttl = redis.command({"PTTL", fence}).integer;
    EXPECT_GT(ttl, 0) << "no expiry";
    EXPECT_LE(ttl, 60'000);
}

// A fence counter that is not a number is refused with a message naming it; nothing is taken.
TEST(KeyExpiry, ACounterThatIsNotANumberIsRefused) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("bad");
    redis.command({"SET", redis.lock_key(name) + ":fence", "x"});
    dlock::mutex m(redis, name);
    try {
        (void)m.try_lock();
        ADD_FAILURE() << "granted on a counter that is not a number";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::unexpected_reply);
        EXPECT_NE(std::string(e.what()).find("fence counter"), std::string::npos) << e.what();
    }
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 0);
    // The counter is left as it was (the grant's write of it was put back).
    EXPECT_EQ(redis.command({"GET", redis.lock_key(name) + ":fence"}).text, "x");
}

TEST(KeyExpiry, IdleExpiryMustBePositive) {
    try {
        dlock::redis::client redis({.url = shared_redis().url(), .idle_expiry = 0ms});
        ADD_FAILURE() << "idle_expiry 0 accepted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("idle_expiry"), std::string::npos) << e.what();
    }
}

// A semaphore's number of permits goes with its last holder (after the idle period), not
// before: holders keep it alive, however long they hold.
TEST(KeyExpiry, ASemaphoreKeepsItsNumberWhileHeld) {
    dlock::redis::client redis({.url = shared_redis().url(), .idle_expiry = idle});
    const auto name = unique_name("sem");
    const auto limit = redis.lock_key(name) + ":limit";
    dlock::counting_semaphore sem(redis, name, 2, {.lease = lease});
    sem.acquire();
    // Held for several idle periods and leases (the watchdog renews): the number stays.
    const auto until = std::chrono::steady_clock::now() + scaled(4 * lease);
    while (std::chrono::steady_clock::now() < until) {
        ASSERT_EQ(redis.command({"GET", limit}).text, "2");
        std::this_thread::sleep_for(50ms);
    }
    sem.release();
    EXPECT_TRUE(eventually([&] { return redis.command({"EXISTS", limit}).integer == 0; }, 10s));
}

// Item: a semaphore asked for with another number of permits than the server records waits as
// the recorded one, and says so (both numbers) through the client's error handler, once.
TEST(SemaphorePermits, AMismatchIsReportedWithBothNumbers) {
    std::mutex guard;
    std::vector<std::string> said;  // guarded by `guard`
    dlock::redis::client redis(
        {.url = shared_redis().url(), .error_handler = [&](std::error_code ec, std::string_view w) {
             std::lock_guard lk(guard);
             said.push_back(std::string(w) + " [" + ec.message() + "]");
         }});
    const auto name = unique_name("sem");
    dlock::counting_semaphore two(redis, name, 2);
    two.acquire(2);
    {
        std::lock_guard lk(guard);
        EXPECT_TRUE(said.empty()) << said.front();
    }
    dlock::counting_semaphore five(redis, name, 5);
    EXPECT_FALSE(five.try_acquire_for(scaled(300ms))) << "2 of 2 permits are held";
    {
        std::lock_guard lk(guard);
        ASSERT_EQ(said.size(), 1u) << "said once per acquire call";
        EXPECT_NE(said.front().find("has 2 permits"), std::string::npos) << said.front();
        EXPECT_NE(said.front().find("not the 5"), std::string::npos) << said.front();
        EXPECT_NE(said.front().find(name), std::string::npos) << said.front();
    }
    two.release(2);
    five.set_permits(5);  // the operator's fix: now both numbers agree
    {
        std::lock_guard lk(guard);
        said.clear();
    }
    five.acquire(5);
    five.release(5);
    std::lock_guard lk(guard);
    EXPECT_TRUE(said.empty()) << said.front();
}

}  // namespace
