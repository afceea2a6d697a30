// ZooKeeper faults on a private 3-node ensemble (docs/zookeeper.md): a holder killed with -9 (its
// session expires and the next waiter gets the lock with a larger token), the leader stopped
// (locking goes on), and a client cut off from the whole ensemble by proxies that stop forwarding
// (lost fires before another client can acquire; after the expiry a new session serves later
// locks; a waiter fails with connection_failed once its session cannot be trusted). No node is left
// behind. And, on a second ensemble in network namespaces, a holder whose follower is cut off
// from the leader loses before the majority side grants the lock.
#include <dlock/dlock.hpp>
#include <dlock/zk/client.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "netns.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"
#include "zk_server.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using steady = std::chrono::steady_clock;

/// One ensemble for the whole binary (started on first use, torn down at exit).
dlock::test::zk_ensemble& ensemble() {
    static dlock::test::zk_ensemble e(3);
    return e;
}

constexpr std::string_view base = "/dlock-fault";

std::string url() { return ensemble().url(base); }

/// A path to every server of ensemble() through a zk_proxy of its own, for a client to be cut off
/// from the whole ensemble while the ensemble runs on. (Freezing every server with SIGSTOP instead
/// can leave ZooKeeper 3.8 answering no connect request for over a minute after SIGCONT, while
/// each server reports its mode: a fault of the servers, not of the client under test.)
class proxied_path {
public:
    proxied_path() {
        for (std::size_t i = 0; i < ensemble().size(); ++i)
            proxies_.push_back(std::make_unique<dlock::test::zk_proxy>(ensemble().client_port(i)));
    }
    std::string url() const {
        std::string hosts;
        for (const auto& p : proxies_) hosts += (hosts.empty() ? "" : ",") + p->host();
        return "zk://" + hosts + std::string(base);
    }
    void cut(bool on) {
        for (auto& p : proxies_) p->cut(on);
    }

private:
    std::vector<std::unique_ptr<dlock::test::zk_proxy>> proxies_;
};

/// "1: leader, 2: follower, 3: (no answer)": each server's mode, for a failing test's message.
std::string modes() {
    std::string out;
    for (std::size_t i = 0; i < ensemble().size(); ++i) {
        const auto m = ensemble().mode(i);
        out += (i ? ", " : "") + std::to_string(i + 1) + ": " + (m.empty() ? "(no answer)" : m);
    }
    return out;
}

long long ms_since(steady::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t).count();
}

const bool holder_child =
    dlock::test::register_child("zk_holder", [](const std::vector<std::string>& args) {
        // args: url, lock name, token file, session timeout ms. Holds until killed.
        dlock::zk::client zk({.url = args.at(0),
                              .session_timeout = std::chrono::milliseconds(std::stoi(args.at(3))),
                              .connect_timeout = 10s});
        auto l = zk.acquire(args.at(1), {.wait = 30s});
        dlock::test::write_atomically(args.at(2), std::to_string(l.fencing_token()) + "\n");
        for (;;) ::pause();
        return 0;
    });

TEST(ZkFault, KilledHolderSessionExpiresAndTheNextWaiterGetsTheLock) {
    ASSERT_TRUE(holder_child);
    const auto name = dlock::test::unique_name("killed");
    const dlock::test::temp_dir tmp("dlock-zk-token");
    const std::string file = tmp / "token";
    dlock::test::child_process child("zk_holder", {url(), name, file, "1500"});
    ASSERT_TRUE(eventually([&] { return std::ifstream(file).good(); }, 30s));
    std::uint64_t child_token = 0;
    std::ifstream(file) >> child_token;
    ASSERT_GT(child_token, 0u);

    dlock::zk::client zk({.url = url(), .connect_timeout = scaled(10s)});
    std::error_code ec;
    auto none = zk.acquire_until(name, {}, {}, steady::now() + 100ms, ec);
    ASSERT_EQ(ec, dlock::errc::timeout) << "the child holds it";
    child.kill9();
    EXPECT_EQ(child.wait(10s), 128 + 9);
    const auto killed = steady::now();
    auto l = zk.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
    ASSERT_FALSE(ec) << ec.message();
    const auto waited = steady::now() - killed;
    EXPECT_GT(l.fencing_token(), child_token);
    EXPECT_GE(waited, 1s) << "not before the holder's session expired";
    EXPECT_LT(waited, scaled(15s));
    l.release();
    EXPECT_TRUE(ensemble().children(zk.lock_path(name)).empty());
}

const bool paused_holder_child =
    dlock::test::register_child("zk_paused_holder", [](const std::vector<std::string>& args) {
        // args: url, lock name, dir, session timeout ms. Writes <dir>/token once it holds, waits
        // until the grant is lost, then writes <dir>/lost with release()'s error code value.
        dlock::zk::client zk({.url = args.at(0),
                              .session_timeout = std::chrono::milliseconds(std::stoi(args.at(3))),
                              .connect_timeout = 10s});
        auto l = zk.acquire(args.at(1), {.wait = 30s});
        const auto publish = [&](const std::string& file, const std::string& text) {
            dlock::test::write_atomically(args.at(2) + "/" + file, text + "\n");
        };
        publish("token", std::to_string(l.fencing_token()));
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        auto lost = l.lost_token();
        cv.wait(lock, lost, [] { return false; });  // returns once lost fires
        std::error_code ec;
        l.release(ec);
        publish("lost", std::to_string(ec.value()));
        return ec == dlock::errc::lock_lost ? 0 : 1;
    });

TEST(ZkFault, PausedHolderSeesLostAfterResume) {
    ASSERT_TRUE(paused_holder_child);
    const auto name = dlock::test::unique_name("paused");
    const dlock::test::temp_dir tmp("dlock-zk-paused");
    const std::string dir = tmp.path();
    dlock::test::child_process child("zk_paused_holder", {url(), name, dir, "1500"});
    ASSERT_TRUE(eventually([&] { return std::ifstream(dir + "/token").good(); }, 30s));
    std::uint64_t child_token = 0;
    std::ifstream(dir + "/token") >> child_token;

    child.stop_signal(SIGSTOP);  // a GC pause: its session expires meanwhile
    dlock::zk::client zk({.url = url(), .connect_timeout = scaled(10s)});
    std::error_code ec;
    auto l = zk.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_GT(l.fencing_token(), child_token) << "the resource can reject the paused holder";
    child.stop_signal(SIGCONT);
    EXPECT_EQ(child.wait(30s), 0) << "the resumed holder sees lost; release says lock_lost";
    EXPECT_TRUE(std::ifstream(dir + "/lost").good());
    l.release();
    EXPECT_TRUE(ensemble().children(zk.lock_path(name)).empty());
}

TEST(ZkFault, LockingGoesOnWithTheLeaderStopped) {
    dlock::zk::client zk({.url = url(), .session_timeout = 4s, .connect_timeout = scaled(10s)});
    const auto name = dlock::test::unique_name("leader");
    std::uint64_t last = 0;
    const auto cycle = [&](int n) {
        for (int i = 0; i < n; ++i) {
            std::error_code ec;
            auto l = zk.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
            ASSERT_FALSE(ec) << ec.message();
            EXPECT_GT(l.fencing_token(), last);
            last = l.fencing_token();
        }
    };
    cycle(5);
    std::size_t leader = 0;
    ASSERT_TRUE(eventually(
        [&] {
            for (std::size_t i = 0; i < ensemble().size(); ++i) {
                if (ensemble().mode(i) == "leader") {
                    leader = i;
                    return true;
                }
            }
            return false;
        },
        10s));
    ensemble().stop(leader);
    cycle(10);
    // A second client, started while one server is down, works too.
    dlock::zk::client other({.url = url(), .connect_timeout = scaled(10s)});
    std::error_code ec;
    auto l = other.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_GT(l.fencing_token(), last);
    l.release();
    ensemble().start(leader);
    EXPECT_TRUE(ensemble().children(zk.lock_path(name)).empty());
}

TEST(ZkFault, CutOffClientLosesBeforeAnotherAcquires) {
    const auto name = dlock::test::unique_name("cutoff");
    const auto session = 2000ms;
    proxied_path path;
    dlock::zk::client a(
        {.url = path.url(), .session_timeout = session, .connect_timeout = scaled(10s)});
    std::error_code ec;
    auto held = a.acquire_until(name, {}, {}, steady::now() + scaled(10s), ec);
    ASSERT_FALSE(ec) << ec.message();
    const auto token = held.fencing_token();
    std::atomic<steady::rep> lost_at{0};
    std::stop_callback on_lost(held.lost_token(),
                               [&] { lost_at = steady::now().time_since_epoch().count(); });

    // While cut off, the lease is uncertain (disconnected) before it is lost.
    std::atomic<bool> seen_uncertain{false};
    std::jthread sampler([&](std::stop_token stop) {
        while (!stop.stop_requested() && !held.lost_token().stop_requested()) {
            if (held.state() == dlock::lock_state::uncertain) seen_uncertain = true;
            std::this_thread::sleep_for(2ms);
        }
    });

    const auto paused = steady::now();
    path.cut(true);
    const bool lost = eventually([&] { return lost_at.load() != 0; }, 10s);
    // Keep a cut off past the session timeout, so the ensemble expires its session.
    std::this_thread::sleep_until(paused + session + scaled(1s));
    path.cut(false);
    ASSERT_TRUE(lost) << "lost never fired while cut off";
    const steady::time_point lost_time{steady::duration(lost_at.load())};
    EXPECT_LT(lost_time - paused, session) << "lost fires before the server may expire us";
    EXPECT_EQ(held.state(), dlock::lock_state::lost);
    sampler.join();
    EXPECT_TRUE(seen_uncertain.load()) << "the disconnection should show as uncertain first";

    dlock::zk::client b({.url = url(), .connect_timeout = scaled(10s)});
    auto taken = b.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
    ASSERT_FALSE(ec) << ec.message();
    const auto acquired = steady::now();
    EXPECT_LT(lost_time, acquired) << "lost must fire before another client acquires";
    const auto taken_token = taken.fencing_token();
    EXPECT_GT(taken_token, token);
    held.release(ec);  // the node went with the session, or was deleted by our loss handling
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    taken.release();

    // a's session expired; a new one serves later locks.
    auto again = a.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_GT(again.fencing_token(), taken_token);
    EXPECT_EQ(again.state(), dlock::lock_state::held);
    again.release();
    EXPECT_TRUE(ensemble().children(a.lock_path(name)).empty());
}

TEST(ZkFault, WaitingCutOffFromTheEnsembleFailsOnceTheSessionCannotBeTrusted) {
    const auto session = 2000ms;
    proxied_path path;
    dlock::zk::client c(
        {.url = path.url(), .session_timeout = session, .connect_timeout = scaled(500ms)});
    const auto name = dlock::test::unique_name("down");
    std::error_code ec;
    auto warm = c.acquire_until(name + "-warm", {}, {}, steady::now() + scaled(10s), ec);
    ASSERT_FALSE(ec) << ec.message();
    warm.release();
    path.cut(true);
    const auto paused = steady::now();
    // No deadline: it must still end, with connection_failed, once the session is past trusting
    // and a new one cannot be opened.
    auto l = c.acquire_until(name, {}, {}, steady::time_point::max(), ec);
    const auto took = steady::now() - paused;
    path.cut(false);
    EXPECT_EQ(ec, dlock::errc::connection_failed) << ec.message();
    EXPECT_FALSE(l);
    EXPECT_LT(took, session + scaled(500ms) + scaled(2s));
    // Once the path is back, the client serves locks again on a new session. Under load its
    // first connection may take longer than this client's short connect_timeout: a
    // connection_failed meanwhile is retried.
    int attempts = 0;
    std::string last;
    const auto restored = steady::now();
    ASSERT_TRUE(eventually(
        [&] {
            ++attempts;
            const auto began = steady::now();
            l = c.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
            last = std::to_string(ms_since(began)) + " ms: " + dlock::last_error_message(ec);
            return ec != dlock::errc::connection_failed;
        },
        30s))
        << attempts << " attempts in " << ms_since(restored) << " ms, the last failed after "
        << last << "\nserver modes now: " << modes() << "\n"
        << ensemble().log_tails();
    EXPECT_FALSE(ec) << ec.message();
    l.release();
    EXPECT_TRUE(ensemble().children(c.lock_path(name)).empty());
}

// A holder connected only to a follower that is cut off from the leader. The follower keeps
// answering the holder (pings, reads) until it notices, about syncLimit ticks later, while the
// leader only hears about the holder's session from that follower and expires it one session
// timeout after the last report that got through. The holder must give up (lost) before the
// majority side grants the lock to someone else (docs/zookeeper.md, "Sessions, validity and
// loss"). The follower's JVM runs in its own network namespace, joined by a veth pair to a
// private namespace that holds everything else of this test; iptables inside the follower's
// namespace black-holes every TCP packet except its client port. How far a holder that trusts
// too long overlaps depends on where the cut falls against the follower's reports and the
// leader's expiry ticks, so the scenario runs a few rounds at different phases.
TEST(ZkPartition, HolderOnACutOffFollowerLosesBeforeTheMajorityGrants) {
    if (const auto why = dlock::test::netns_unavailable(); !why.empty()) GTEST_SKIP() << why;
    dlock::test::private_netns net;  // this thread, its servers and clients; gone at the end
    dlock::test::veth_netns cut_off("10.77.0.1/24", "10.77.0.2/24");
    // Server 1 (the lowest id) in its own namespace: a fresh ensemble elects the highest id of
    // the first quorum, so server 1 follows.
    dlock::test::zk_ensemble zk(3, {.tick = 250ms,
                                    .addresses = {"10.77.0.2", "10.77.0.1", "10.77.0.1"},
                                    .wrappers = {cut_off.exec_prefix(), {}, {}}});
    // Within the server's [2, 20] ticks. A holder stalled for about 0.4 of it (a loaded machine)
    // loses its lease before the cut: such a round proves nothing and is run again.
    const auto session = std::min(scaled(1000ms), std::chrono::milliseconds(5000));
    const auto since = [](steady::time_point from, steady::rep t) {
        return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          steady::time_point(steady::duration(t)) - from)
                                          .count());
    };
    const int rounds = 4;
    int round = 0, attempts = 0;
    for (; round < rounds && attempts < 3 * rounds; ++attempts) {
        SCOPED_TRACE("round " + std::to_string(round));
        ASSERT_TRUE(eventually([&] { return zk.mode(0) == "follower"; }, 30s)) << zk.mode(0);
        dlock::zk::client holder({.url = "zk://" + zk.host(0) + "/dlock-partition",
                                  .session_timeout = session,
                                  .connect_timeout = scaled(10s)});
        dlock::zk::client majority(
            {.url = "zk://" + zk.host(1) + "," + zk.host(2) + "/dlock-partition",
             .session_timeout = 10s,
             .connect_timeout = scaled(10s)});
        const auto name = dlock::test::unique_name("partition");
        std::error_code ec;
        auto held = holder.acquire_until(name, {}, {}, steady::now() + scaled(10s), ec);
        ASSERT_FALSE(ec) << ec.message();

        // Everything below is measured on this process's steady clock.
        std::atomic<steady::rep> lost_at{0}, trusted_at{0}, granted_at{0};
        std::stop_callback on_lost(held.lost_token(),
                                   [&] { lost_at = steady::now().time_since_epoch().count(); });
        // The last instant the holder still claimed the lock (held or uncertain, time left).
        std::jthread sampler([&](std::stop_token stop) {
            while (!stop.stop_requested()) {
                const auto now = steady::now();
                if (held.state() != dlock::lock_state::lost && held.expires_in() > 0ms)
                    trusted_at = now.time_since_epoch().count();
                std::this_thread::sleep_for(1ms);
            }
        });
        dlock::lease taken;
        std::jthread waiter([&] {
            std::error_code wec;
            taken = majority.acquire_until(name, {}, {}, steady::now() + scaled(60s), wec);
            if (!wec) granted_at = steady::now().time_since_epoch().count();
        });
        ASSERT_TRUE(
            eventually([&] { return zk.children(majority.lock_path(name)).size() == 2; }, 10s));
        // Heartbeats in their steady state. Then cut at the worst moment for the holder: right
        // after its claimed validity moved forward (a heartbeat was just answered, and the
        // follower has not yet reported that touch to the leader), at a phase of the leader's
        // expiry ticks where the leader's rounding (expiry times are rounded up to a multiple of
        // tickTime of CLOCK_MONOTONIC, the clock of steady_clock here) helps least: a holder that
        // claims s + T - drift for a heartbeat sent at s, whose previous touch reached the leader
        // 125-250 ms before s, overlaps most when s mod 250 is just under 125, i.e. when its
        // claimed end (s + 988) mod 250 is about 75-112.
        std::this_thread::sleep_for(session);
        const auto claimed_end = [&] {
            return std::chrono::duration_cast<std::chrono::milliseconds>(
                       (steady::now() + held.expires_in()).time_since_epoch())
                .count();
        };
        cut_off.arm_cut({zk.client_port(0)});
        auto previous = claimed_end();
        const auto aim_until = steady::now() + 2500ms, give_up = steady::now() + scaled(10s);
        while (steady::now() < give_up) {
            const auto end = claimed_end();
            const bool phase = end % 250 >= 75 && end % 250 <= 112;
            if (end > previous + 20 && (phase || steady::now() > aim_until)) break;
            previous = std::max(previous, end);
            std::this_thread::sleep_for(200us);
        }
        if (held.state() == dlock::lock_state::lost) {
            std::printf("round %d: the holder lost its lease before the cut (a stall); again\n",
                        round);
            continue;
        }
        const auto cutting = steady::now();
        cut_off.cut_tcp_except({zk.client_port(0)});
        const auto cut = steady::now();  // the rules took effect during the call
        std::printf(
            "round %d: cut in %lld ms\n", round,
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::milliseconds>(cut - cutting).count()));
        const bool granted = eventually([&] { return granted_at.load() != 0; }, 30s);
        EXPECT_TRUE(eventually([&] { return lost_at.load() != 0; }, 10s));
        sampler.request_stop();
        sampler.join();
        waiter.join();
        cut_off.heal();
        ASSERT_TRUE(granted) << "the majority side never granted the lock";

        const auto lost_ms = since(cut, lost_at), trusted_ms = since(cut, trusted_at),
                   granted_ms = since(cut, granted_at);
        std::printf(
            "round %d: after the cut, the holder lost at %lld ms (last claimed at %lld ms), the "
            "majority granted at %lld ms: overlap %lld ms\n",
            round, lost_ms, trusted_ms, granted_ms, std::max(0LL, trusted_ms - granted_ms));
        EXPECT_LT(lost_at.load(), granted_at.load()) << "lost must fire before the majority grants";
        EXPECT_LT(trusted_at.load(), granted_at.load())
            << "the holder claimed the lock while the majority side had granted it";
        EXPECT_GT(taken.fencing_token(), held.fencing_token());
        held.release(ec);
        EXPECT_EQ(ec, dlock::errc::lock_lost);
        taken.release(ec);
        EXPECT_FALSE(ec) << ec.message();
        ++round;
    }
    EXPECT_EQ(round, rounds) << "the holder kept losing its lease before the cut";
}

}  // namespace
