// etcd faults on a private 3-member cluster (docs/etcd.md): a holder killed with -9 (its etcd
// lease expires and the next waiter gets the lock with a larger token), the leader killed while a
// lock is held and another waited for (locking goes on), and the whole cluster stopped past the
// TTL (the holder sees uncertain, then lost, before a queued waiter is granted). No key is left
// behind.
#include <dlock/dlock.hpp>
#include <dlock/etcd/client.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "etcd_server.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using steady = std::chrono::steady_clock;

/// One cluster for the whole binary (started on first use, torn down at exit).
dlock::test::etcd_cluster& cluster() {
    static dlock::test::etcd_cluster c(3);
    return c;
}

const bool holder_child =
    dlock::test::register_child("etcd_holder", [](const std::vector<std::string>& args) {
        // args: url, lock name, token file, session TTL in seconds. Holds until killed.
        dlock::etcd::client etcd({.url = args.at(0),
                                  .session_ttl = std::chrono::seconds(std::stoi(args.at(3))),
                                  .connect_timeout = 10s});
        auto l = etcd.acquire(args.at(1), {.wait = 30s});
        const auto tmp = args.at(2) + ".tmp";
        std::ofstream(tmp) << l.fencing_token() << "\n";
        std::rename(tmp.c_str(), args.at(2).c_str());
        for (;;) ::pause();
        return 0;
    });

TEST(EtcdFault, KilledHolderLeaseExpiresAndTheNextWaiterGetsTheLock) {
    ASSERT_TRUE(holder_child);
    const auto name = dlock::test::unique_name("killed");
    char tmpl[] = "/tmp/dlock-etcd-token.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    const std::string file = std::string(tmpl) + "/token";
    dlock::test::child_process child("etcd_holder", {cluster().url(), name, file, "2"});
    ASSERT_TRUE(eventually([&] { return std::ifstream(file).good(); }, scaled(30s)));
    std::uint64_t child_token = 0;
    std::ifstream(file) >> child_token;
    std::remove(file.c_str());
    ::rmdir(tmpl);
    ASSERT_GT(child_token, 0u);

    dlock::etcd::client etcd({.url = cluster().url(), .connect_timeout = scaled(10s)});
    std::error_code ec;
    auto none = etcd.acquire_until(name, {}, {}, steady::now() + 100ms, ec);
    ASSERT_EQ(ec, dlock::errc::timeout) << "the child holds it";
    child.kill9();
    EXPECT_EQ(child.wait(10s), 128 + 9);
    const auto killed = steady::now();
    auto l = etcd.acquire_until(name, {}, {}, steady::now() + scaled(30s), ec);
    ASSERT_FALSE(ec) << dlock::last_error_message(ec);
    EXPECT_GT(l.fencing_token(), child_token);
    EXPECT_GE(steady::now() - killed, 1s) << "not before the holder's lease expired";
    l.release();
    EXPECT_EQ(cluster().count(etcd.key_prefix(name)), 0u);
}

TEST(EtcdFault, LeaderKilledWhileALockIsHeldAndWaitedFor) {
    const auto name = dlock::test::unique_name("leader");
    dlock::etcd::client a(
        {.url = cluster().url(), .session_ttl = 6s, .connect_timeout = 10s, .command_timeout = 1s});
    dlock::etcd::client b(
        {.url = cluster().url(), .session_ttl = 6s, .connect_timeout = 10s, .command_timeout = 1s});
    auto held = a.acquire(name, {.wait = scaled(10s)});
    std::atomic<bool> got{false};
    std::uint64_t b_token = 0;
    std::thread waiter([&] {
        auto l = b.acquire(name, {.wait = scaled(60s)});
        b_token = l.fencing_token();
        got = true;
    });
    ASSERT_TRUE(eventually([&] { return cluster().count(a.key_prefix(name)) == 2; }, scaled(10s)));
    int leader = -1;
    ASSERT_TRUE(eventually([&] { return (leader = cluster().leader()) >= 0; }, scaled(10s)));
    cluster().kill9(static_cast<std::size_t>(leader));
    // A new leader within about a second; the holder keeps its lock through it.
    ASSERT_TRUE(eventually([&] { return cluster().leader() >= 0; }, scaled(20s)));
    std::this_thread::sleep_for(scaled(2s));  // keep-alives go on through the election
    EXPECT_NE(held.state(), dlock::lock_state::lost);
    EXPECT_FALSE(got.load());
    const auto a_token = held.fencing_token();
    std::error_code ec;
    held.release(ec);
    EXPECT_FALSE(ec) << dlock::last_error_message(ec);
    waiter.join();
    EXPECT_TRUE(got.load());
    EXPECT_GT(b_token, a_token);
    cluster().start(static_cast<std::size_t>(leader));
}

TEST(EtcdFault, ClusterStoppedPastTheTtlMakesTheHolderUncertainThenLostBeforeAWaiterGetsIt) {
    const auto name = dlock::test::unique_name("paused");
    dlock::etcd::client a({.url = cluster().url(),
                           .session_ttl = 3s,
                           .connect_timeout = 10s,
                           .command_timeout = 500ms});
    dlock::etcd::client b({.url = cluster().url(),
                           .session_ttl = 3s,
                           .connect_timeout = 10s,
                           .command_timeout = 500ms});
    auto held = a.acquire(name, {.wait = scaled(10s)});
    std::mutex m;
    steady::time_point lost_at = steady::time_point::max();
    std::stop_callback on_lost(held.lost_token(), [&] {
        std::lock_guard lock(m);
        lost_at = steady::now();
    });
    steady::time_point granted_at{};
    std::thread waiter([&] {
        auto l = b.acquire(name, {.wait = scaled(60s)});
        granted_at = steady::now();
    });
    ASSERT_TRUE(eventually([&] { return cluster().count(a.key_prefix(name)) == 2; }, scaled(10s)));
    cluster().pause_all();
    // Keep-alives fail: uncertain first, then lost once the lease's validity has passed.
    bool uncertain_seen = false;
    const auto until = steady::now() + scaled(20s);
    while (steady::now() < until && held.state() != dlock::lock_state::lost) {
        if (held.state() == dlock::lock_state::uncertain) uncertain_seen = true;
        std::this_thread::sleep_for(5ms);
    }
    EXPECT_TRUE(uncertain_seen);
    EXPECT_TRUE(eventually([&] { return held.lost_token().stop_requested(); }, scaled(5s)));
    cluster().resume_all();
    waiter.join();
    std::lock_guard lock(m);
    EXPECT_LT(lost_at, granted_at) << "the waiter was granted before the holder knew it lost";
    std::error_code ec;
    held.release(ec);  // its key went with its lease: lost, nothing else touched
    EXPECT_EQ(ec, dlock::errc::lock_lost) << dlock::last_error_message(ec);
}

}  // namespace
