// Faults against the single-instance Redis lock: paused holders, stopped, restarted and paused
// servers. Each test records what the holder saw and asserts that no two holders overlapped.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "fenced_resource.hpp"
#include "queued_lock_checks.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::fenced_write;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;
using steady = std::chrono::steady_clock;

/// The ids of this process's threads.
std::set<std::string> task_ids() {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
        out.insert(e.path().filename().string());
    return out;
}

/// What the scheduler counted for a thread of this process (/proc/self/task/<tid>/schedstat).
struct thread_schedule {
    std::chrono::nanoseconds on_cpu{-1};
    long long slices = -1;  // times it was put on a CPU: wake-ups and preemptions
};

thread_schedule schedule_of(const std::string& tid) {
    std::ifstream in("/proc/self/task/" + tid + "/schedstat");
    long long on_cpu = -1, waited = -1, slices = -1;
    in >> on_cpu >> waited >> slices;
    return {std::chrono::nanoseconds(on_cpu), slices};
}

const bool paused_holder =
    dlock::test::register_child("paused_holder", [](const std::vector<std::string>& args) {
        // args: url, lock name, lease ms, marker key, resource key
        dlock::redis::client redis({.url = args.at(0), .command_timeout = 500ms});
        auto grant =
            redis.acquire(args.at(1), {.lease = std::chrono::milliseconds(std::stoll(args.at(2)))});
        if (fenced_write(redis, args.at(4), grant.fencing_token()) != 1) return 10;
        redis.command({"SET", args.at(3), std::to_string(grant.fencing_token())});
        // Here the parent SIGSTOPs us past our lease, lets another client take the lock, then
        // SIGCONTs.
        const auto deadline = std::chrono::steady_clock::now() + 60s;
        while (!grant.lost_token().stop_requested() &&
               std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(5ms);
        }
        if (!grant.lost_token().stop_requested()) return 11;  // never noticed the loss
        if (grant.state() != dlock::lock_state::lost) return 12;
        if (fenced_write(redis, args.at(4), grant.fencing_token()) != 0)
            return 13;  // stale token accepted
        return 0;
    });

const bool mutex_waiter =
    dlock::test::register_child("mutex_waiter", [](const std::vector<std::string>& args) {
        // args: url, lock name. Waits for the lock (registered among its waiters), then holds it.
        dlock::redis::client redis({.url = args.at(0)});
        dlock::mutex m(redis, args.at(1), {.lease = 30s});
        m.lock();
        std::this_thread::sleep_for(10min);
        return 0;
    });

long long registered_waiters(dlock::redis::client& redis, const std::string& name) {
    const auto r = redis.command({"ZCARD", redis.lock_key(name) + ":mutex_waiters"});
    return r.type == dlock::redis::reply::kind::integer ? r.integer : 0;
}

// Freezes the head of the registered mutex waiters (in `head`) with nothing of its in flight: an
// attempt landing after the test's unlock would simply take the lock. `channels`: the hand-off
// channels subscribed by then (one per waiting client).
::testing::AssertionResult freeze_registered_head(dlock::redis::client& redis,
                                                  const std::string& name, std::size_t channels,
                                                  dlock::test::child_process& head) {
    const auto key = redis.lock_key(name);
    return dlock::test::freeze_between_refreshes(redis, key, key + ":mutex_waiters",
                                                 key + ":mutex_alive", channels, head);
}

// A release hands the key to the head of the registered waiters (docs/redis-lock.md, "Waking one
// waiter"). A head that is paused then never takes it up; the key was handed with the short
// hand-off lease (2 s), so the others find it free at their re-check after that lease, not at the
// holder's lease; the paused head's entry went with the grant, so nothing is handed to it again.
TEST(RedisFault, APausedHeadHandedTheKeyHoldsUpTheOthersForAtMostTheHandOffLease) {
    ASSERT_TRUE(mutex_waiter);
    constexpr auto handoff_lease = 2000ms;  // dlock::redis::detail::handoff_lease
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("paused-head");
    dlock::mutex holder(redis, name, {.lease = 60s});
    holder.lock();
    dlock::test::child_process head("mutex_waiter", {shared_redis().url(), name});
    ASSERT_TRUE(eventually([&] { return registered_waiters(redis, name) == 1; }, 10s));
    std::atomic<bool> granted{false};
    std::atomic<steady::rep> granted_at{0};
    std::atomic<int> cycles{0};
    std::atomic<long long> longest_later_ms{0};
    std::jthread other([&] {
        dlock::redis::client own({.url = shared_redis().url()});
        dlock::mutex m(own, name, {.lease = 60s});
        if (!m.try_lock_for(scaled(30s))) return;
        granted_at = steady::now().time_since_epoch().count();
        granted = true;
        m.unlock();
        // Later cycles: the paused head is not queued any more, so nothing stalls them.
        for (int i = 0; i < 20; ++i) {
            const auto asked = steady::now();
            if (!m.try_lock_for(scaled(10s))) return;
            const auto waited =
                std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - asked);
            longest_later_ms = std::max<long long>(longest_later_ms.load(), waited.count());
            m.unlock();
            ++cycles;
        }
    });
    ASSERT_TRUE(eventually([&] { return registered_waiters(redis, name) == 2; }, 10s));
    ASSERT_TRUE(freeze_registered_head(redis, name, 2, head));
    const auto released_at = steady::now();
    holder.unlock();
    ASSERT_TRUE(eventually([&] { return granted.load(); }, scaled(10s)))
        << "the other waiter is stuck behind the paused head";
    const auto waited = steady::time_point(steady::duration(granted_at.load())) - released_at;
    EXPECT_LE(waited, handoff_lease + scaled(1s)) << "more than the hand-off lease";
    other.join();
    EXPECT_EQ(cycles.load(), 20);
    EXPECT_LE(std::chrono::milliseconds(longest_later_ms.load()), scaled(500ms))
        << "a later cycle was held up: the paused head was handed the key again";
    EXPECT_EQ(registered_waiters(redis, name), 0);
    std::cout << "[ paused   ] the other waiter got the lock "
              << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
              << " ms after the release; later cycles waited at most " << longest_later_ms.load()
              << " ms\n";
    head.kill9();
    head.wait(scaled(10s));
}

TEST(RedisFault, HolderPausedPastItsLeaseSeesLostAndItsTokenIsRejected) {
    ASSERT_TRUE(paused_holder);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    const auto resource = unique_name("resource");
    const auto lease = scaled(1200ms);
    dlock::test::child_process holder(
        "paused_holder",
        {shared_redis().url(), name, std::to_string(lease.count()), marker, resource});
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    holder.stop_signal(SIGSTOP);
    const auto stopped_at = std::chrono::steady_clock::now();
    dlock::mutex m(redis, name);
    ASSERT_TRUE(m.try_lock_for(lease + scaled(2s))) << "the paused holder's lease runs out";
    EXPECT_GE(std::chrono::steady_clock::now() - stopped_at, scaled(1200ms) / 3)
        << "not before its last renewal ran out";
    EXPECT_EQ(fenced_write(redis, resource, m.fencing_token()), 1);
    holder.stop_signal(SIGCONT);
    EXPECT_EQ(holder.wait(scaled(30s)), 0)
        << "10: first write, 11: never saw lost, 12: state, 13: stale token accepted";
    m.unlock();
}

TEST(RedisFault, ServerStoppedPastTheLeaseMakesTheHolderLoseIt) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(300ms)});
    const auto lease = scaled(1200ms);
    std::atomic<bool> on_lost_called{false};
    auto grant =
        redis.acquire(unique_name(),
                      {.lease = lease, .on_lost = [&](std::error_code) { on_lost_called = true; }});
    const auto granted_at = std::chrono::steady_clock::now();
    server.stop();
    EXPECT_TRUE(eventually([&] { return grant.state() != dlock::lock_state::held; }, lease))
        << "uncertain first";
    ASSERT_TRUE(
        eventually([&] { return grant.lost_token().stop_requested(); }, lease + scaled(1s)));
    EXPECT_LE(std::chrono::steady_clock::now() - granted_at, lease + scaled(1s));
    EXPECT_TRUE(on_lost_called.load());
    EXPECT_EQ(grant.expires_in(), 0ms);
    server.start();
}

TEST(RedisFault, ShortOutageWithinTheLeaseIsRidden) {
    dlock::test::redis_server server({.appendonly = true});
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(300ms)});
    const auto lease = scaled(3s);
    auto grant = redis.acquire(unique_name(), {.lease = lease});
    server.stop();  // appendfsync always: the key survives the restart
    server.start();
    // The watchdog's next renewal reconnects and extends the same grant.
    EXPECT_TRUE(eventually(
        [&] { return grant.state() == dlock::lock_state::held && grant.expires_in() > lease / 2; },
        lease));
    std::this_thread::sleep_for(lease);  // past the original lease: still held thanks to renewal
    EXPECT_EQ(grant.state(), dlock::lock_state::held);
    EXPECT_NO_THROW(grant.release());
}

TEST(RedisFault, RestartWithoutPersistenceLosesTheLockAndSaysSo) {
    dlock::test::redis_server server;  // no persistence: a restart forgets every key
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(300ms)});
    auto grant = redis.acquire(unique_name(), {.lease = scaled(1500ms)});
    server.kill9();
    server.start();
    EXPECT_TRUE(eventually([&] { return grant.lost_token().stop_requested(); }, scaled(3s)))
        << "renewal finds the key gone and reports the loss at once";
}

TEST(RedisFault, WaiterGetsAnErrorWhenTheServerGoesAway) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(300ms)});
    const auto name = unique_name();
    auto holder = redis.acquire(name, {.lease = 60s});
    std::atomic<bool> failed{false};
    std::error_code seen;
    std::jthread waiter([&] {
        dlock::mutex m(redis, name);
        try {
            m.lock();
        } catch (const dlock::error& e) {
            seen = e.code();
            failed = true;
        }
    });
    // It waits: registered among the mutex waiters.
    ASSERT_TRUE(eventually(
        [&] {
            return server.command({"ZCARD", redis.lock_key(name) + ":mutex_waiters"}) == "1";
        },
        5s));
    server.stop();
    EXPECT_TRUE(eventually([&] { return failed.load(); }, scaled(5s)))
        << "lock() reports the backend failure";
    waiter.join();
    EXPECT_EQ(seen, dlock::errc::connection_failed);
    server.start();
}

TEST(RedisFault, WritesPausedPastTheLeaseMakeTheHolderLoseIt) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(200ms)});
    const auto lease = scaled(1000ms);
    auto grant = redis.acquire(unique_name(), {.lease = lease});
    server.command({"CLIENT", "PAUSE", std::to_string(scaled(3000ms).count()), "WRITE"});
    const auto paused_at = std::chrono::steady_clock::now();
    ASSERT_TRUE(
        eventually([&] { return grant.lost_token().stop_requested(); }, lease + scaled(1s)));
    EXPECT_LE(std::chrono::steady_clock::now() - paused_at, lease + scaled(500ms))
        << "lost no later than its deadline";
    server.command({"CLIENT", "UNPAUSE"});
}

TEST(RedisFault, AnotherLeasesRenewalStuckOnAPausedServerDoesNotDelayALoss) {
    dlock::test::redis_server server;
    // A long command_timeout: a renewal may wait this long for an answer.
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(3s)});
    // Renewed every second: its first renewal is in flight when the short lease runs out.
    auto long_grant = redis.acquire(unique_name("long"), {.lease = scaled(3s)});
    std::atomic<steady::rep> on_lost_at{0};
    auto short_grant =
        redis.acquire(unique_name("short"),
                      {.lease = scaled(1200ms), .renew = false, .on_lost = [&](std::error_code) {
                           on_lost_at = steady::now().time_since_epoch().count();
                       }});
    const auto valid_until = steady::now() + short_grant.expires_in();
    std::atomic<steady::rep> lost_at{0};
    const std::stop_callback record(short_grant.lost_token(),
                                    [&] { lost_at = steady::now().time_since_epoch().count(); });
    server.pause();  // SIGSTOP: the socket stays open, nothing answers
    ASSERT_TRUE(
        eventually([&] { return lost_at.load() != 0 && on_lost_at.load() != 0; }, scaled(6s)));
    const auto tolerance = scaled(150ms);
    for (const auto at : {lost_at.load(), on_lost_at.load()}) {
        const auto fired = steady::time_point(steady::duration(at));
        EXPECT_GE(fired, valid_until - 2ms) << "never before its validity ends";
        EXPECT_LE(fired - valid_until, tolerance)
            << "late by "
            << std::chrono::duration_cast<std::chrono::milliseconds>(fired - valid_until).count()
            << " ms: the watchdog waited on the other lease's renewal";
    }
    server.resume();
    EXPECT_NE(long_grant.state(), dlock::lock_state::lost);
}

TEST(RedisFault, SubscriberThreadSleepsAfterARestartWithALingeringChannel) {
    dlock::test::redis_server server;
    const auto before = task_ids();
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(300ms)});
    std::vector<std::string> added;
    for (const auto& t : task_ids())
        if (!before.contains(t)) added.push_back(t);
    ASSERT_EQ(added.size(), 1u) << "one background thread per client";
    const auto worker = added.front();
    const auto name = unique_name();
    auto holder = redis.acquire(name, {.lease = 60s});
    {
        // Waits on the release channel, then gives up: the channel lingers, subscribed, with
        // nobody waiting.
        dlock::mutex m(redis, name);
        EXPECT_FALSE(m.try_lock_for(scaled(200ms)));
    }
    server.kill9();  // drops the subscriber connection while the channel lingers
    server.start();
    const auto wall_start = steady::now();
    const auto before_window = schedule_of(worker);
    std::this_thread::sleep_for(scaled(1s));  // a measuring window, not a wait for a condition
    const auto after_window = schedule_of(worker);
    const auto wall = steady::now() - wall_start;
    const auto used = after_window.on_cpu - before_window.on_cpu;
    const auto slices = after_window.slices - before_window.slices;
    // Asleep it uses well under 1 ms and is woken a handful of times; spinning it uses the CPU
    // share it gets (on an idle machine) or is put back on a CPU over and over (on a busy one).
    const auto ms = [](auto d) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    EXPECT_LT(used, wall / 100) << "the background thread used " << ms(used) << " ms of CPU in "
                                << ms(wall) << " ms: it spins";
    EXPECT_LT(slices, 50) << "the background thread ran " << slices << " times in " << ms(wall)
                          << " ms: it spins";
}

}  // namespace
