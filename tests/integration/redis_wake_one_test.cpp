// dlock::mutex on one Redis server wakes one waiter per release, not every waiting process
// (docs/redis-lock.md, "Waking one waiter"): waiters register on the server, a release wakes the
// live head only, and several waiters of one process on one name are each woken by name.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "redis/scripts.hpp"
#include "redis_server.hpp"
#include "redis_tap.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::redis_server;
using dlock::test::unique_name;

long long integer_of(const dlock::redis::reply& r) {
    if (r.is_nil()) return 0;
    return r.type == dlock::redis::reply::kind::integer ? r.integer : std::stoll(r.text);
}

long long registered_waiters(dlock::redis::client& redis, const std::string& name) {
    return integer_of(redis.command({"ZCARD", redis.lock_key(name) + ":mutex_waiters"}));
}

/// Waiters subscribed to the release channel (how waiters waited before they registered).
long long release_subscribers(dlock::redis::client& redis, const std::string& name) {
    return redis.command({"PUBSUB", "NUMSUB", redis.release_channel(name)}).elements.at(1).integer;
}

/// Whether MONITOR line `line` runs script `sha` on lock key `key` (not a command inside it).
bool runs_script(const std::string& line, std::string_view sha, const std::string& key) {
    return line.find("[0 lua]") == std::string::npos &&
           line.find("\"EVALSHA\" \"" + std::string(sha) + "\"") != std::string::npos &&
           line.find("\"" + key + "\"") != std::string::npos;
}

TEST(RedisWakeOne, AReleaseRunsAboutOneAcquirePerReleaseNotOnePerWaitingClient) {
    constexpr int waiters = 16;
    redis_server server;
    dlock::redis::client control({.url = server.url()});
    const auto name = unique_name("herd");
    const auto key = control.lock_key(name);
    const auto* acquire = dlock::redis::detail::find_script("acquire");
    const auto* release = dlock::redis::detail::find_script("release");
    ASSERT_TRUE(acquire && release);

    dlock::mutex holder(control, name, {.lease = 60s});
    holder.lock();
    // One client per waiter: each has its own subscriber connection, as separate processes do.
    std::vector<std::unique_ptr<dlock::redis::client>> clients;
    for (int i = 0; i < waiters; ++i)
        clients.push_back(std::make_unique<dlock::redis::client>(
            dlock::redis::client_options{.url = server.url()}));
    std::atomic<int> inside{0}, done{0};
    std::atomic<bool> overlapped{false};
    {
        std::vector<std::jthread> threads;
        for (int i = 0; i < waiters; ++i) {
            threads.emplace_back([&, i] {
                dlock::mutex m(*clients[i], name, {.lease = 60s});
                m.lock();
                if (++inside > 1) overlapped = true;
                --inside;
                m.unlock();
                ++done;
            });
        }
        // Every waiter waits: registered on the server (or, before registration existed,
        // subscribed to the release channel).
        ASSERT_TRUE(eventually(
            [&] {
                return registered_waiters(control, name) == waiters ||
                       release_subscribers(control, name) == waiters;
            },
            20s));
        dlock::test::monitor_tap tap(server.port());
        holder.unlock();
        ASSERT_TRUE(eventually([&] { return done.load() == waiters; }, 60s));
        const auto marker = unique_name("end-of-trace");
        control.command({"ECHO", marker});
        // From the holder's release to the last waiter's: each release and the acquires it set
        // off (the winner's, the losers', and any periodic re-check that fell in between).
        int releases = 0, acquires = 0;
        for (const auto& line : tap.lines_until(marker, 20s)) {
            if (runs_script(line, release->sha1, key)) {
                ++releases;
            } else if (runs_script(line, acquire->sha1, key) && releases > 0 &&
                       releases < waiters + 1) {
                ++acquires;
            }
        }
        ASSERT_EQ(releases, waiters + 1);
        const double per_release = static_cast<double>(acquires) / waiters;
        std::cout << "[ herd     ] " << acquires << " acquire scripts over " << waiters
                  << " releases (" << per_release << " per release)\n";
        EXPECT_LE(per_release, 2.0) << acquires << " acquire scripts over " << waiters
                                    << " releases: each release woke the herd";
    }
    EXPECT_FALSE(overlapped.load());
    EXPECT_EQ(registered_waiters(control, name), 0);
}

TEST(RedisWakeOne, SeveralWaitersOfOneProcessAllGetTheLockInTurn) {
    constexpr int waiters = 8;
    dlock::redis::client redis({.url = dlock::test::shared_redis().url()});
    const auto name = unique_name("local");
    dlock::mutex holder(redis, name, {.lease = 60s});
    holder.lock();
    std::atomic<int> inside{0}, done{0};
    std::atomic<bool> overlapped{false};
    std::vector<std::uint64_t> tokens(waiters);
    {
        std::vector<std::jthread> threads;
        for (int i = 0; i < waiters; ++i) {
            threads.emplace_back([&, i] {
                dlock::mutex m(redis, name, {.lease = 60s});
                m.lock();
                if (++inside > 1) overlapped = true;
                tokens[i] = m.fencing_token();
                --inside;
                m.unlock();
                ++done;
            });
        }
        // Each registered with an id of its own (one client, one hand-off channel).
        ASSERT_TRUE(eventually([&] { return registered_waiters(redis, name) == waiters; }, 20s));
        EXPECT_EQ(redis.inspect(name).waiters, static_cast<std::uint32_t>(waiters));
        holder.unlock();
        ASSERT_TRUE(eventually([&] { return done.load() == waiters; }, 60s)) << done.load();
    }
    EXPECT_FALSE(overlapped.load());
    std::sort(tokens.begin(), tokens.end());
    EXPECT_EQ(std::adjacent_find(tokens.begin(), tokens.end()), tokens.end());
    EXPECT_EQ(registered_waiters(redis, name), 0);
}

// The turn (docs/redis-lock.md, "Waking one waiter"): a barger that locks again the moment it
// releases, with no pause, cannot starve the registered head. Its first release after the head
// registered wakes the head (barging allowed: the barger may win that race), its second reserves
// the free lock for the head, which then gets it. Counted, not timed: the barger's grants during
// which the waiter was already registered (its own entry goes with each of its grants, so any
// entry it sees is the waiter's), with a fencing token below the waiter's. Ideally at most 2:
// the grant in progress when the waiter registered and one barged; 3 leaves room for a waiter
// woken slower than the turn window on a loaded machine. Without the turn a waiter loses most
// races to such a barger and waits through dozens of its grants.
TEST(RedisWakeOne, ABargerCannotStarveTheWokenHead) {
    constexpr int rounds = 10;
    dlock::redis::client barger_client({.url = dlock::test::shared_redis().url()});
    dlock::redis::client waiter_client({.url = dlock::test::shared_redis().url()});
    const auto name = unique_name("barged");
    for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        std::atomic<bool> stop{false};
        std::atomic<int> cycles{0};
        std::vector<std::uint64_t> seen_waiting;  // barger grants with the waiter registered
        std::jthread barger([&] {
            dlock::mutex m(barger_client, name, {.lease = 10s});
            while (!stop.load()) {
                m.lock();
                if (registered_waiters(barger_client, name) > 0)
                    seen_waiting.push_back(m.fencing_token());
                m.unlock();
                ++cycles;
            }
        });
        ASSERT_TRUE(eventually([&] { return cycles.load() >= 5; }, 10s));
        dlock::mutex waiter(waiter_client, name, {.lease = 10s});
        ASSERT_TRUE(waiter.try_lock_for(dlock::test::scaled(30s)));
        const auto mine = waiter.fencing_token();
        waiter.unlock();
        stop = true;
        barger.join();
        const auto before_mine = std::count_if(seen_waiting.begin(), seen_waiting.end(),
                                               [&](std::uint64_t t) { return t < mine; });
        EXPECT_LE(before_mine, 3) << "the barger was granted the lock " << before_mine
                                  << " times while the waiter was registered, before it ("
                                  << cycles.load() << " cycles in all)";
    }
    EXPECT_EQ(registered_waiters(barger_client, name), 0);
}

// While a turn is pending the free lock counts as held for everyone but its waiter: try_lock()
// fails, and inspect() reports it reserved, not free.
TEST(RedisWakeOne, APendingTurnIsHeldForTryLockAndReportedAsReserved) {
    dlock::redis::client redis({.url = dlock::test::shared_redis().url()});
    const auto name = unique_name("turn");
    const auto key = redis.lock_key(name);
    // A turn as a release leaves it for a woken head that is slow to come (a paused one).
    redis.command({"SET", key + ":mutex_turn", "mutex:elsewhere.1", "PX", "60000"});
    dlock::mutex m(redis, name, {.lease = 10s});
    EXPECT_FALSE(m.try_lock());
    const auto info = redis.inspect(name);
    EXPECT_EQ(info.type, dlock::lock_type::mutex);
    EXPECT_FALSE(info.held);
    ASSERT_TRUE(info.turn_left);
    EXPECT_GT(*info.turn_left, 0ms);
    // Another kind is refused on the name meanwhile (one name, one lock kind).
    dlock::lock_request fair;
    fair.kind = dlock::lock_kind::fair;
    std::error_code ec;
    const auto other = redis.acquire(name, fair, {.lease = 10s, .wait = 0s}, ec);
    EXPECT_EQ(ec, dlock::errc::unexpected_reply) << ec.message();
    // The turn ends: the lock is free for everyone again.
    redis.command({"DEL", key + ":mutex_turn"});
    EXPECT_FALSE(redis.inspect(name).turn_left);
    ASSERT_TRUE(m.try_lock());
    m.unlock();
}

TEST(RedisWakeOne, AWaiterThatGivesUpLeavesTheRegistry) {
    dlock::redis::client redis({.url = dlock::test::shared_redis().url()});
    const auto name = unique_name("gives-up");
    dlock::mutex holder(redis, name, {.lease = 60s});
    holder.lock();
    dlock::mutex waiter(redis, name);
    EXPECT_FALSE(waiter.try_lock_for(dlock::test::scaled(1500ms)));  // past one re-check
    EXPECT_EQ(registered_waiters(redis, name), 0);
    // A try_lock never registers: it does not wait.
    EXPECT_FALSE(waiter.try_lock());
    EXPECT_EQ(registered_waiters(redis, name), 0);
    holder.unlock();
}

}  // namespace
