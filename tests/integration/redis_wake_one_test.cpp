// dlock::mutex on one Redis server hands the lock to one waiter per release, not a wake-up to
// every waiting process (docs/redis-lock.md, "Waking one waiter"): waiters register on the
// server, a release hands the key to the live head only and tells it, and several waiters of one
// process on one name are each told by name.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "redis/protocol.hpp"
#include "redis/scripts.hpp"
#include "redis_server.hpp"
#include "redis_tap.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using dlock::test::runs_script;

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::redis_server;
using dlock::test::scaled;
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

/// The runs of the script whose function is `function` on `key` by a registered mutex waiter (its
/// id, "mutex:...", among the arguments), in order, with the server's time of each (MONITOR's
/// timestamp).
class registered_attempts {
public:
    registered_attempts(dlock::test::monitor_tap& tap, std::string_view function, std::string key)
        : tap_(tap), function_(function), key_(std::move(key)) {}

    /// The next such run (server time since the epoch), or nullopt after `timeout` (scaled).
    std::optional<std::chrono::microseconds> next(std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + scaled(timeout);
        while (runs_.empty() && std::chrono::steady_clock::now() < deadline) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            for (const auto& line : tap_.lines_until(function_, std::max(left, 1ms))) {
                if (runs_script(line, function_, key_) &&
                    line.find("\"mutex:") != std::string::npos)
                    runs_.push_back(server_time(line));
            }
        }
        if (runs_.empty()) return std::nullopt;
        const auto at = runs_.front();
        runs_.pop_front();
        return at;
    }

private:
    /// "<seconds>.<microseconds> [<db> <address>] ..."
    static std::chrono::microseconds server_time(const std::string& line) {
        const auto dot = line.find('.');
        return std::chrono::seconds(std::stoll(line.substr(0, dot))) +
               std::chrono::microseconds(std::stoll(line.substr(dot + 1, 6)));
    }

    dlock::test::monitor_tap& tap_;
    std::string function_;
    std::string key_;
    std::deque<std::chrono::microseconds> runs_;
};

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
        // off (none for the grant itself, which the release hands over; a periodic re-check that
        // fell in between; a herd's losers).
        int releases = 0, acquires = 0;
        for (const auto& line : tap.lines_until(marker, 20s)) {
            if (runs_script(line, release->function, key)) {
                ++releases;
            } else if (runs_script(line, acquire->function, key) && releases > 0 &&
                       releases < waiters + 1) {
                ++acquires;
            }
        }
        ASSERT_EQ(releases, waiters + 1);
        const double per_release = static_cast<double>(acquires) / waiters;
        std::cout << "[ herd     ] " << acquires << " acquire scripts over " << waiters
                  << " releases (" << per_release << " per release)\n";
        EXPECT_LE(per_release, 1.0) << acquires << " acquire scripts over " << waiters
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

// No barging past a registered waiter (docs/redis-lock.md, "Waking one waiter"): a barger that
// locks again the moment it releases, with no pause, finds the key handed to the waiter by its
// own release, and waits behind it. Counted, not timed: the barger's grants during which the
// waiter was already registered (its own entry goes with each of its grants, so any entry it sees
// is the waiter's), with a fencing token below the waiter's: at most the one in progress when the
// waiter registered. With the turn of earlier versions (a release woke the head, and only a head
// woken twice had the lock reserved) it was up to 3; without the turn, 4 to 834.
TEST(RedisWakeOne, ABargerNeverPassesARegisteredWaiter) {
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
        EXPECT_LE(before_mine, 1) << "the barger was granted the lock " << before_mine
                                  << " times while the waiter was registered, before it ("
                                  << cycles.load() << " cycles in all)";
    }
    EXPECT_EQ(registered_waiters(barger_client, name), 0);
}

// A free key with a live registered waiter is that waiter's: try_lock() (which never registers)
// fails, the key is handed to the waiter's id, and inspect() reports it held. Another kind is
// refused on the name meanwhile (one name, one lock kind).
TEST(RedisWakeOne, AFreeKeyWithALiveWaiterGoesToTheWaiterNotToTryLock) {
    dlock::redis::client redis({.url = dlock::test::shared_redis().url()});
    const auto name = unique_name("queued");
    const auto key = redis.lock_key(name);
    // A waiter registered as an attempt leaves it (its client is elsewhere, slow to come).
    const auto now_ms = redis.command({"TIME"});
    const auto deadline = std::stoll(now_ms.elements.at(0).text) * 1000 + 60'000;
    redis.command({"ZADD", key + ":mutex_waiters", "1", "mutex:elsewhere.1"});
    redis.command({"ZADD", key + ":mutex_alive", std::to_string(deadline), "mutex:elsewhere.1"});
    dlock::mutex m(redis, name, {.lease = 10s});
    EXPECT_FALSE(m.try_lock());
    EXPECT_EQ(redis.command({"GET", key}).text, "mutex:elsewhere.1");
    EXPECT_EQ(registered_waiters(redis, name), 0);
    const auto info = redis.inspect(name);
    EXPECT_EQ(info.type, dlock::lock_type::mutex);
    EXPECT_TRUE(info.held);
    dlock::lock_request fair;
    fair.kind = dlock::lock_kind::fair;
    std::error_code ec;
    const auto other = redis.acquire(name, fair, {.lease = 10s, .wait = 0s}, ec);
    EXPECT_EQ(ec, dlock::errc::unexpected_reply) << ec.message();
    // The handed key runs out with the hand-off lease, as nobody takes it up.
    redis.command({"DEL", key});
    ASSERT_TRUE(m.try_lock());
    m.unlock();
}

// A release that hands the key to a registered waiter writes the key over: the name is never
// free, so there is no DEL and no 'released' (as in a fair_mutex hand-off); only the grant goes
// out, on the waiter's hand-off channel. A release with nobody to hand the key to deletes it and
// publishes 'released', which the same tap sees (so its absence before is not the tap's).
TEST(RedisWakeOne, AHandOffWritesTheKeyOverAndPublishesNoReleased) {
    redis_server server;
    dlock::redis::client redis({.url = server.url()});
    const auto name = unique_name("handed");
    const auto del = "\"DEL\" \"" + redis.lock_key(name) + "\"";
    const auto released = "\"PUBLISH\" \"" + redis.release_channel(name) + "\" \"released\"";
    const auto grant = "\"PUBLISH\" \"" + redis.release_channel(name) + ":mutex:";
    // Every command the server ran since the last mark, up to this one.
    dlock::test::monitor_tap tap(server.port());
    int marks = 0;
    const auto commands_since_mark = [&] {
        const auto mark = "mark-" + std::to_string(++marks) + "-" + name;
        redis.command({"ECHO", mark});
        std::string all;
        for (const auto& line : tap.lines_until(mark, scaled(10s))) all += line + "\n";
        EXPECT_NE(all.find(mark), std::string::npos) << "the tap did not see the mark";
        return all;
    };
    dlock::mutex holder(redis, name, {.lease = 60s});
    holder.lock();
    std::atomic<bool> granted{false}, let_go{false};
    const auto release_waiter = [&] {
        let_go = true;
        let_go.notify_one();
    };
    std::jthread waiter([&] {
        dlock::mutex m(redis, name, {.lease = 60s});
        m.lock();
        granted = true;
        let_go.wait(false);
        m.unlock();
    });
    // Destroyed before `waiter` is joined: a failed assertion below still lets it finish.
    const struct on_exit {
        decltype(release_waiter)& f;
        ~on_exit() { f(); }
    } let_waiter_go{release_waiter};
    ASSERT_TRUE(eventually([&] { return registered_waiters(redis, name) == 1; }, 20s));
    commands_since_mark();
    holder.unlock();
    ASSERT_TRUE(eventually([&] { return granted.load(); }, 20s));
    const auto hand_off = commands_since_mark();
    EXPECT_NE(hand_off.find(grant), std::string::npos) << hand_off;
    EXPECT_EQ(hand_off.find(del), std::string::npos) << hand_off;
    EXPECT_EQ(hand_off.find(released), std::string::npos) << hand_off;
    release_waiter();
    waiter.join();
    const auto to_nobody = commands_since_mark();
    EXPECT_NE(to_nobody.find(del), std::string::npos) << to_nobody;
    EXPECT_NE(to_nobody.find(released), std::string::npos) << to_nobody;
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 0);
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

// A waiter whose hand-off channel's SUBSCRIBE has not reached the server when wait_subscribed()
// gives up (command_timeout: a slow or reconnecting subscriber connection) registers anyway, and
// the release hands it the key and publishes its grant to nobody. The SUBSCRIBE's confirmation,
// when it comes, makes it attempt again at once, and the attempt takes up the key handed to it
// (docs/handoff-model.md, "What spin found"); without that it slept until its periodic re-check.
//
// Not a timing race: after a failed registered attempt the waiter's next timed attempt comes no
// sooner than waiter_liveness / 3 (666 ms) after it (the holder's lease is far longer), so the
// gap from the latest registered attempt before the release to the one that takes the lock is at
// least 666 ms whenever only the timer brings it, on any machine (server times, so a clock slewed
// by NTP could shave a fraction of a millisecond: hence the bound of 3/4 of it, 499 ms). Woken by
// the confirmation, it takes only the test's unlock, the confirmation and one script; the 499 ms
// are the tolerance for a loaded machine.
TEST(RedisWakeOne, ASubscribeConfirmedAfterTheReleaseWakesTheWaiterItMissed) {
    redis_server server;
    dlock::redis::client control({.url = server.url()});
    dlock::test::request_holder proxy(server.port(), "\r\nSUBSCRIBE\r\n");
    // The waiter's client goes through the proxy, which holds its SUBSCRIBE back until told.
    dlock::redis::client through({.url = proxy.url(), .command_timeout = scaled(500ms)});
    const auto name = unique_name("late-subscribe");
    const auto key = control.lock_key(name);
    const auto* acquire = dlock::redis::detail::find_script("acquire");
    ASSERT_TRUE(acquire);
    const auto recheck = dlock::redis::detail::waiter_liveness / 3;  // the timer's least delay

    dlock::mutex holder(control, name, {.lease = 60s});
    holder.lock();
    dlock::test::monitor_tap tap(server.port());
    registered_attempts attempts(tap, acquire->function, key);
    std::atomic<bool> got{false};
    std::jthread waiter([&] {
        dlock::mutex m(through, name, {.lease = 60s});
        if (m.try_lock_for(scaled(30s))) {
            got = true;
            m.unlock();
        }
    });
    // Its registering attempt ran after wait_subscribed() gave up: the SUBSCRIBE is still held,
    // so nothing is subscribed on the server and the release below tells nobody.
    auto registered = attempts.next(20s);
    ASSERT_TRUE(registered) << "the waiter never registered";
    while (const auto later = attempts.next(1ms)) registered = later;  // a re-check since, if any
    ASSERT_TRUE(proxy.holding());
    ASSERT_EQ(registered_waiters(control, name), 1);
    ASSERT_TRUE(control.command({"PUBSUB", "CHANNELS", "*"}).elements.empty());
    holder.unlock();
    proxy.let_through();  // the SUBSCRIBE lands, after the release

    const auto taken = attempts.next(20s);
    ASSERT_TRUE(taken) << "the waiter never attempted again";
    waiter.join();
    EXPECT_TRUE(got.load());
    EXPECT_LT(*taken - *registered, recheck * 3 / 4)
        << "the waiter slept on the free lock until its periodic re-check (no sooner than "
        << recheck.count() << " ms): the confirmation of its SUBSCRIBE did not wake it";
    EXPECT_EQ(registered_waiters(control, name), 0);
}

}  // namespace
