// The Redis lock's contract on a real redis-server: std lock adapters, fencing tokens, owner
// isolation, the watchdog, max_hold, loss detection, and surviving SCRIPT FLUSH and restarts.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

struct collected_errors {
    std::mutex mutex;
    std::vector<std::error_code> codes;
    auto handler() {
        return [this](std::error_code ec, std::string_view) {
            std::lock_guard guard(mutex);
            codes.push_back(ec);
        };
    }
    bool saw(dlock::errc e) {
        std::lock_guard guard(mutex);
        for (const auto& c : codes)
            if (c == e) return true;
        return false;
    }
};

dlock::redis::client make_client(const std::string& url, collected_errors* errors = nullptr) {
    dlock::redis::client_options o{.url = url};
    if (errors) o.error_handler = errors->handler();
    return dlock::redis::client(std::move(o));
}

TEST(RedisLock, TryLockFailsOnlyWhenHeldElsewhere) {
    auto redis = make_client(shared_redis().url());
    const auto name = unique_name();
    dlock::mutex holder(redis, name), other(redis, name);
    ASSERT_TRUE(holder.try_lock());
    EXPECT_FALSE(other.try_lock());
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(other.try_lock_for(scaled(300ms)));
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_GE(waited, scaled(300ms)) << "never early";
    EXPECT_LT(waited, scaled(300ms) + scaled(1500ms)) << "late by at most the tolerance";
    EXPECT_FALSE(other.try_lock_until(std::chrono::system_clock::now() - 1s))
        << "past deadline: one attempt";
    EXPECT_FALSE(other.try_lock_for(-5s)) << "negative timeout counts as zero";
    holder.unlock();
    EXPECT_TRUE(other.try_lock_for(scaled(1s)));
    other.unlock();
}

TEST(RedisLock, FencingTokensStrictlyIncrease) {
    auto redis = make_client(shared_redis().url());
    const auto name = unique_name();
    std::uint64_t previous = 0;
    for (int i = 0; i < 20; ++i) {
        auto grant = redis.acquire(name, {.wait = 0s});
        EXPECT_GT(grant.fencing_token(), previous);
        previous = grant.fencing_token();
    }
    dlock::mutex m(redis, name);
    m.lock();
    EXPECT_GT(m.fencing_token(), previous);
    EXPECT_GT(m.expires_in(), 25s);
    EXPECT_LE(m.expires_in(), 30s);
    m.unlock();
}

TEST(RedisLock, AnotherTokenCanNeitherReleaseNorExtend) {
    collected_errors errors;
    auto redis = make_client(shared_redis().url(), &errors);
    const auto name = unique_name();
    const auto key = redis.lock_key(name);
    auto grant = redis.acquire(name, {.lease = scaled(900ms)});
    // Someone else's grant replaces ours (as after our lease expired and another client took it).
    redis.command({"SET", key, "someone-else", "PX", "60000"});
    std::error_code ec;
    grant.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    EXPECT_EQ(redis.command({"GET", key}).text, "someone-else")
        << "release must not delete another owner's lock";

    // Renewal must not extend another owner's key either: ours is detected lost instead.
    auto second = redis.acquire(unique_name("renew"), {.lease = scaled(900ms)});
    const auto second_key = redis.lock_key(second.name());
    redis.command({"SET", second_key, "someone-else", "PX", "5000"});
    EXPECT_TRUE(eventually([&] { return second.lost_token().stop_requested(); }, 3s));
    EXPECT_EQ(second.state(), dlock::lock_state::lost);
    EXPECT_EQ(redis.command({"GET", second_key}).text, "someone-else");
    EXPECT_LE(redis.command({"PTTL", second_key}).integer, 5000) << "not extended";
}

TEST(RedisLock, UnlockAfterLossNeverThrowsAndReportsToErrorHandler) {
    collected_errors errors;
    auto redis = make_client(shared_redis().url(), &errors);
    const auto name = unique_name();
    dlock::mutex m(redis, name, {.lease = 10s});
    m.lock();
    redis.command({"SET", redis.lock_key(name), "intruder"});
    EXPECT_NO_THROW(m.unlock());
    EXPECT_TRUE(errors.saw(dlock::errc::lock_lost));
    EXPECT_EQ(redis.command({"GET", redis.lock_key(name)}).text, "intruder");
}

TEST(RedisLock, WatchdogKeepsLockAcrossThreeLeases) {
    auto redis = make_client(shared_redis().url());
    const auto lease = scaled(600ms);
    auto grant = redis.acquire(unique_name(), {.lease = lease});
    const auto key = redis.lock_key(grant.name());
    std::this_thread::sleep_for(3 * lease);  // the behaviour under test is "survives 3 leases"
    EXPECT_EQ(grant.state(), dlock::lock_state::held);
    EXPECT_FALSE(grant.lost_token().stop_requested());
    EXPECT_GT(redis.command({"PTTL", key}).integer, 0);
    EXPECT_GT(grant.expires_in(), 0ms);
    EXPECT_NO_THROW(grant.release());
    EXPECT_EQ(redis.command({"EXISTS", key}).integer, 0);
}

TEST(RedisLock, FixedLeaseExpiresOnTime) {
    auto redis = make_client(shared_redis().url());
    const auto lease = scaled(800ms);
    const auto start = std::chrono::steady_clock::now();
    auto grant = redis.acquire(unique_name(), {.lease = lease, .renew = false});
    const auto key = redis.lock_key(grant.name());
    ASSERT_TRUE(eventually(
        [&] {
            return redis.command({"EXISTS", key}).integer == 0;
        },
        lease + scaled(1s)));
    EXPECT_GE(std::chrono::steady_clock::now() - start, lease - 50ms)
        << "the key must not expire early";
    EXPECT_TRUE(eventually([&] { return grant.lost_token().stop_requested(); }, 1s));
    EXPECT_EQ(grant.state(), dlock::lock_state::lost);
    EXPECT_EQ(grant.expires_in(), 0ms);
}

TEST(RedisLock, MaxHoldStopsRenewal) {
    auto redis = make_client(shared_redis().url());
    const auto lease = scaled(500ms);
    const auto max_hold = scaled(1500ms);
    std::atomic<bool> lost_called{false};
    const auto start = std::chrono::steady_clock::now();
    auto grant = redis.acquire(
        unique_name(), {.lease = lease, .max_hold = max_hold, .on_lost = [&](std::error_code) {
                            lost_called = true;
                        }});
    const auto key = redis.lock_key(grant.name());
    std::this_thread::sleep_for(2 * lease);  // past one lease: renewal must have kept it
    EXPECT_EQ(redis.command({"EXISTS", key}).integer, 1);
    ASSERT_TRUE(eventually(
        [&] {
            return redis.command({"EXISTS", key}).integer == 0;
        },
        max_hold + scaled(1s)));
    EXPECT_GE(std::chrono::steady_clock::now() - start, max_hold - 50ms);
    EXPECT_TRUE(eventually([&] { return lost_called.load(); }, 2s));
}

TEST(RedisLock, LostWhenKeyDeletedBehindHoldersBack) {
    auto redis = make_client(shared_redis().url());
    std::atomic<int> lost_calls{0};
    auto grant =
        redis.acquire(unique_name(), {.lease = scaled(900ms), .on_lost = [&](std::error_code ec) {
                                          if (ec == dlock::errc::lock_lost) ++lost_calls;
                                      }});
    redis.command({"DEL", redis.lock_key(grant.name())});
    EXPECT_TRUE(eventually([&] { return grant.lost_token().stop_requested(); }, 3s));
    EXPECT_EQ(grant.state(), dlock::lock_state::lost);
    EXPECT_TRUE(eventually([&] { return lost_calls.load() == 1; }, 1s));
}

TEST(RedisLock, LostWhenAnotherOwnerTakesTheKey) {
    auto redis = make_client(shared_redis().url());
    const auto name = unique_name();
    auto grant = redis.acquire(name, {.lease = scaled(900ms)});
    redis.command({"DEL", redis.lock_key(name)});
    auto intruder = redis.acquire(name, {.lease = 10s, .wait = 0s});  // a legitimate new holder
    EXPECT_GT(intruder.fencing_token(), grant.fencing_token());
    EXPECT_TRUE(eventually([&] { return grant.lost_token().stop_requested(); }, 3s));
    EXPECT_EQ(intruder.state(), dlock::lock_state::held);
    std::error_code ec;
    grant.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 1)
        << "the intruder keeps its lock";
}

TEST(RedisLock, ObserverSeesTheLifecycle) {
    std::mutex mutex;
    std::vector<dlock::event_kind> seen;
    dlock::redis::client redis(
        {.url = shared_redis().url(), .observer = [&](const dlock::lock_event& e) {
             std::lock_guard guard(mutex);
             seen.push_back(e.kind);
         }});
    {
        auto grant = redis.acquire(unique_name(), {.lease = scaled(600ms)});
        EXPECT_TRUE(eventually(
            [&] {
                std::lock_guard guard(mutex);
                return std::find(seen.begin(), seen.end(), dlock::event_kind::renewed) !=
                       seen.end();
            },
            3s));
    }
    std::lock_guard guard(mutex);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.front(), dlock::event_kind::acquired);
    EXPECT_EQ(seen.back(), dlock::event_kind::released);
}

TEST(RedisLock, SurvivesScriptFlush) {
    auto redis = make_client(shared_redis().url());
    const auto name = unique_name();
    auto first = redis.acquire(name, {.lease = scaled(900ms)});
    redis.command({"SCRIPT", "FLUSH"});
    std::this_thread::sleep_for(scaled(600ms));  // let a renewal run against the flushed cache
    EXPECT_EQ(first.state(), dlock::lock_state::held);
    redis.command({"SCRIPT", "FLUSH"});
    EXPECT_NO_THROW(first.release());
    redis.command({"SCRIPT", "FLUSH"});
    auto second = redis.acquire(name, {.wait = 0s});
    EXPECT_GT(second.fencing_token(), 0u);
}

TEST(RedisLock, SurvivesServerRestart) {
    dlock::test::redis_server server;
    auto redis = make_client(server.url());
    const auto name = unique_name();
    { auto warm = redis.acquire(name, {.wait = 0s}); }
    server.stop();
    std::error_code ec;
    auto during = redis.acquire(name, {.wait = 0s}, ec);
    EXPECT_EQ(ec, dlock::errc::connection_failed);
    EXPECT_FALSE(during);
    server.start();
    auto after = redis.acquire(name, {.wait = 0s});  // the pooled connections reconnect
    EXPECT_EQ(after.state(), dlock::lock_state::held);
}

// The server's work for uncontended lock/unlock pairs (docs/redis-lock.md, "Acquire in one round
// trip" and "Release"): two scripts, and inside them the guard's EXISTS, the clock's TIME, the
// fence counter's one SET ... GET (no GET of its own: lib/fence.lua), the lock's SET; then GET,
// DEL, PUBLISH and the waiters' EXISTS: 10 commands (11 when the fence was a GET and a SET).
// Counted with INFO commandstats on a private server (no other client), after a warm-up pair that
// opens the connections and loads the scripts. Counts, not times.
struct pair_calls {
    long scripts = 0;  ///< FCALL, EVALSHA and EVAL calls
    long total = 0;    ///< every command, those the scripts ran included
    std::string seen;  ///< the calls per command, for the failure message
};

template <class Lock>
pair_calls calls_of_pairs(long pairs) {
    dlock::test::redis_server server;
    auto redis = make_client(server.url());
    const auto name = unique_name();
    {
        Lock warm(redis, name + ".warm");
        std::lock_guard lock(warm);
    }
    EXPECT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
    Lock m(redis, name);
    for (long i = 0; i < pairs; ++i) {
        m.lock();
        m.unlock();
    }
    pair_calls out;
    for (const auto& [command, n] : server.command_calls()) {
        if (command == "fcall" || command == "evalsha" || command == "eval") out.scripts += n;
        out.total += n;
        out.seen += command + "=" + std::to_string(n) + " ";
    }
    return out;
}

TEST(RedisLock, UncontendedPairRunsTwoScriptsOfTenCommands) {
    constexpr long pairs = 10;
    const auto calls = calls_of_pairs<dlock::mutex>(pairs);
    EXPECT_EQ(calls.scripts, 2 * pairs) << calls.seen;
    EXPECT_LE(calls.total, 10 * pairs) << calls.seen;
}

TEST(RedisLock, UncontendedFairPairRunsTwoScriptsOfTenCommands) {
    constexpr long pairs = 10;
    const auto calls = calls_of_pairs<dlock::fair_mutex>(pairs);
    EXPECT_EQ(calls.scripts, 2 * pairs) << calls.seen;
    EXPECT_LE(calls.total, 10 * pairs) << calls.seen;
}

// Used by RedisWaiting.BlockedWaiterGetsLockAfterHolderCrash (redis_waiting_test.cpp, same binary).
const bool holder_child =
    dlock::test::register_child("holder", [](const std::vector<std::string>& args) {
        // args: url, lock name, lease ms, marker key. Holds the lock until killed.
        dlock::redis::client redis({.url = args.at(0)});
        auto grant =
            redis.acquire(args.at(1), {.lease = std::chrono::milliseconds(std::stoll(args.at(2)))});
        redis.command({"SET", args.at(3), std::to_string(grant.fencing_token())});
        std::this_thread::sleep_for(1h);
        return 0;
    });

}  // namespace
