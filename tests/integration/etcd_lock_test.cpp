// The etcd backend against one private etcd member (docs/etcd.md): the recipe's keys as
// `etcdctl lock` writes them, exclusion between clients and between threads of one client,
// fencing tokens (create revisions), the fenced unlock, a waiter whose etcd lease ends, and
// interoperation with the real etcdctl in both directions.
#include <dlock/connect.hpp>
#include <dlock/dlock.hpp>
#include <dlock/etcd/client.hpp>
#include <dlock/mutex.hpp>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "etcd_server.hpp"
#include "redis_tap.hpp"
#include "spawn.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::read_text;
using dlock::test::scaled;
using dlock::test::shared_etcd;
using dlock::test::shared_etcd_client;

/// The keys under `prefix`, in create order, as etcdctl sees them.
std::vector<std::string> keys_under(const std::string& prefix) {
    const auto r =
        shared_etcd().etcdctl({"get", "--prefix", "--keys-only", "--sort-by=CREATE", prefix});
    std::vector<std::string> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
        if (!line.empty()) out.push_back(line);
    }
    return out;
}

TEST(EtcdLock, TheKeyIsWhatEtcdctlLockWrites) {
    auto c = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-key");
    auto l = c.acquire(name, {.lease = 10s});
    const auto keys = keys_under(name + "/");
    ASSERT_EQ(keys.size(), 1u);
    // "<name>/<lease id in hex>", the fencing token its create revision.
    EXPECT_EQ(keys[0].rfind(name + "/", 0), 0u) << keys[0];
    EXPECT_EQ(keys[0].find_first_not_of("0123456789abcdef", name.size() + 1), std::string::npos)
        << keys[0];
    EXPECT_GT(l.fencing_token(), 0u);
    EXPECT_EQ(l.state(), dlock::lock_state::held);
    l.release();
    EXPECT_TRUE(keys_under(name + "/").empty());
}

TEST(EtcdLock, ClientsExcludeEachOtherAndTokensRise) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-excl");
    auto first = a.acquire(name, {.lease = 10s});
    std::error_code ec;
    auto none = b.acquire(name, {.lease = 10s, .wait = 0ms}, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock::last_error_message(ec);
    EXPECT_FALSE(none);
    std::atomic<bool> got{false};
    std::uint64_t second_token = 0;
    std::thread waiter([&] {
        auto second = b.acquire(name, {.lease = 10s, .wait = scaled(20s)});
        second_token = second.fencing_token();
        got = true;
    });
    // Queued behind the holder: two keys under the prefix, and no grant while it holds.
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/").size() == 2; }, scaled(10s)));
    EXPECT_FALSE(got.load());
    const auto first_token = first.fencing_token();
    first.release();
    waiter.join();
    EXPECT_TRUE(got.load());
    EXPECT_GT(second_token, first_token);
}

TEST(EtcdLock, ThreadsOfOneClientTakeTurns) {
    auto c = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-threads");
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 5; ++i) {
                auto l = c.acquire(name, {.lease = 10s, .wait = scaled(30s)});
                if (inside.fetch_add(1) != 0) ++overlaps;
                std::this_thread::sleep_for(1ms);
                inside.fetch_sub(1);
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(overlaps.load(), 0);
}

// A waiter's watch is (almost) never one that etcd serves from its resync loop, which runs every
// 100 ms: a watch that starts at or below the store's revision (a write landed between the
// waiter's read and its watch, as under contention it often does) waits there, unsynced, before it
// sees the release. Counted, not timed: etcd's gauge of unsynced watchers, read every few ms while
// six clients take turns on one name and a seventh writes elsewhere all along; each rise of it is
// a watch made unsynced. A watch from now can still be made so by etcd itself, when a write lands
// between its reading of its revision and its registering the watch: 2-7 per run here. Waiters
// that watched from their read's revision made 47-60 per run (and took four times as long).
TEST(EtcdLock, AWaiterIsAlmostNeverLeftToEtcdsWatchResync) {
    constexpr int clients = 6, rounds = 15;
    const auto name = dlock::test::unique_name("etcd-synced");
    const std::string gauge = "etcd_debugging_mvcc_slow_watcher_total";
    // Watches of earlier tests are synced within one resync period.
    ASSERT_TRUE(eventually([&] { return shared_etcd().metric(0, gauge) == 0; }, 10s));
    std::vector<dlock::etcd::client> cs;
    for (int i = 0; i < clients; ++i) cs.push_back(shared_etcd_client());
    std::atomic<int> inside{0}, overlaps{0}, done{0}, samples{0}, rises{0};
    // Writes elsewhere, all along: a waiter's read and its watch have one in between most times.
    std::jthread writer(
        [&, c = shared_etcd_client(),
         other = dlock::test::unique_name("etcd-noise")](std::stop_token stop) mutable {
            while (!stop.stop_requested()) c.acquire(other, {.lease = 10s}).release();
        });
    std::jthread sampler([&](std::stop_token stop) {
        double last = 0;
        while (!stop.stop_requested()) {
            const auto v = shared_etcd().metric(0, gauge);
            if (v > last) rises += static_cast<int>(v - last);
            last = v;
            ++samples;
            std::this_thread::sleep_for(2ms);
        }
    });
    {
        std::vector<std::jthread> threads;
        for (int t = 0; t < clients; ++t) {
            threads.emplace_back([&, t] {
                for (int i = 0; i < rounds; ++i) {
                    auto l = cs[t].acquire(name, {.lease = 10s, .wait = scaled(60s)});
                    if (inside.fetch_add(1) != 0) ++overlaps;
                    std::this_thread::sleep_for(1ms);
                    inside.fetch_sub(1);
                }
                ++done;
            });
        }
    }
    sampler.request_stop();
    sampler.join();
    writer.request_stop();
    writer.join();
    EXPECT_EQ(done.load(), clients);
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_GT(samples.load(), 10);
    std::cout << "[ resync   ] " << rises.load() << " unsynced watches over " << samples.load()
              << " samples\n";
    EXPECT_LE(rises.load(), 20) << "waiters' watches waited for etcd's resync";
}

// A release deletes the key only if its create revision is the grant's: a key written again
// under the same name after ours went (here by an administrator) is never removed by our unlock.
TEST(EtcdLock, UnlockIsFencedOnTheCreateRevision) {
    auto c = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-fence");
    auto l = c.acquire(name, {.lease = 10s});
    const auto keys = keys_under(name + "/");
    ASSERT_EQ(keys.size(), 1u);
    ASSERT_EQ(shared_etcd().etcdctl({"del", keys[0]}).status, 0);
    ASSERT_EQ(shared_etcd().etcdctl({"put", keys[0], "newer"}).status, 0);
    std::error_code ec;
    l.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost) << dlock::last_error_message(ec);
    EXPECT_EQ(keys_under(name + "/"), keys);  // the newer key is still there
    shared_etcd().etcdctl({"del", keys[0]});
}

// A waiter whose etcd lease ends (revoked here) stops waiting on its vanished key: it queues
// again under a new lease, and is granted only while its key exists, after the holder.
TEST(EtcdLock, AWaiterWhoseLeaseEndsQueuesAgain) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-expired-waiter");
    auto first = a.acquire(name, {.lease = 10s});
    std::atomic<bool> got{false};
    std::string held_key;
    std::thread waiter([&] {
        auto second = b.acquire(name, {.lease = 10s, .wait = scaled(30s)});
        held_key = b.key_of(second);
        got = true;
        const auto keys = keys_under(name + "/");
        EXPECT_EQ(keys.size(), 1u);
        if (!keys.empty()) {
            EXPECT_EQ(keys[0], held_key);
        }
    });
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/").size() == 2; }, scaled(10s)));
    const auto before = keys_under(name + "/");
    const auto lease_hex = before[1].substr(name.size() + 1);
    ASSERT_EQ(shared_etcd().etcdctl({"lease", "revoke", lease_hex}).status, 0);
    // It queues again under a new lease: a new key, still behind the holder.
    ASSERT_TRUE(eventually(
        [&] {
            const auto now = keys_under(name + "/");
            return now.size() == 2 && now[1] != before[1];
        },
        scaled(20s)));
    EXPECT_FALSE(got.load());
    first.release();
    waiter.join();
    EXPECT_TRUE(got.load());
}

// dlock holds -> `etcdctl lock N` waits; etcdctl holds -> dlock waits.
TEST(EtcdInterop, EtcdctlLockWaitsForDlockAndDlockWaitsForEtcdctl) {
    auto c = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-interop");
    const dlock::test::temp_dir tmp("dlock-etcd-interop");
    const std::string dir = tmp.path();
    const std::string marker = dir + "/held";
    {
        auto l = c.acquire(name, {.lease = 10s});
        // etcdctl lock N -- touch marker: must not run while dlock holds N.
        const auto argv =
            shared_etcd().etcdctl_argv({"lock", name, "--", "/usr/bin/touch", marker});
        const pid_t pid = dlock::test::detail::spawn(argv.front(), argv, -1);
        ASSERT_TRUE(eventually([&] { return keys_under(name + "/").size() == 2; }, scaled(10s)));
        EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "etcdctl ran while dlock held the lock";
        l.release();
        int raw = 0;
        ASSERT_TRUE(dlock::test::detail::wait_for(pid, scaled(20s), raw));
        EXPECT_EQ(dlock::test::detail::decode_status(raw), 0);
        EXPECT_EQ(::access(marker.c_str(), F_OK), 0);
        ::unlink(marker.c_str());
    }
    {
        // `etcdctl lock N` alone holds N until SIGINT, printing its key.
        const std::string out_path = dir + "/out";
        const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_GE(out, 0);
        const auto argv = shared_etcd().etcdctl_argv({"lock", name});
        const pid_t pid = dlock::test::detail::spawn(argv.front(), argv, out);
        ::close(out);
        ASSERT_TRUE(
            eventually([&] { return read_text(out_path).find(name + "/") == 0; }, scaled(10s)));
        std::error_code ec;
        auto none = c.acquire(name, {.lease = 10s, .wait = 0ms}, ec);
        EXPECT_EQ(ec, dlock::errc::timeout) << dlock::last_error_message(ec);
        std::atomic<bool> got{false};
        std::thread waiter([&] {
            auto l = c.acquire(name, {.lease = 10s, .wait = scaled(20s)});
            got = true;
        });
        ASSERT_TRUE(eventually([&] { return keys_under(name + "/").size() == 2; }, scaled(10s)));
        EXPECT_FALSE(got.load());
        ::kill(pid, SIGINT);
        int raw = 0;
        ASSERT_TRUE(dlock::test::detail::wait_for(pid, scaled(10s), raw));
        waiter.join();
        EXPECT_TRUE(got.load());
        ::unlink(out_path.c_str());
    }
}

// A lock named "N/x" keeps its keys under "N/x/", inside lock N's prefix "N/": lock N's queue
// is its own keys ("N/<lease>", no further '/'), so a held "N/x" neither makes N wait nor looks
// like another kind on N (a semaphore N would be refused as "used as a mutex").
TEST(EtcdLock, ANestedNameIsNotInTheWay) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-nest");
    auto inner = a.acquire(name + "/x", {.lease = 10s});
    ASSERT_EQ(keys_under(name + "/").size(), 1u);
    std::error_code ec;
    auto outer = b.acquire(name, {.lease = 10s, .wait = 0ms}, ec);
    EXPECT_TRUE(outer) << "lock N waited for lock N/x: " << dlock::last_error_message(ec);
    EXPECT_EQ(b.inspect(name).holders, outer ? 1u : 0u);
    outer.release();
    auto sem = b.acquire(name, {.kind = dlock::lock_kind::permits, .count = 1, .limit = 2},
                         {.lease = 10s, .wait = 0ms}, ec);
    EXPECT_TRUE(sem) << "a semaphore N beside a held N/x: " << dlock::last_error_message(ec);
    sem.release();
    // N/x still excludes its own kind, and etcdctl's N still waits for everything under N/.
    auto none = b.acquire(name + "/x", {.lease = 10s, .wait = 0ms}, ec);
    EXPECT_FALSE(none);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock::last_error_message(ec);
}

// A record is written once and read by everyone after; its key lies outside every lock's key
// range, so a lock named like the record's prefix is not blocked by it.
TEST(EtcdLock, RecordOnceKeepsTheFirstValueOutsideEveryLocksKeys) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-record") + "/#stripes";
    std::error_code ec;
    EXPECT_EQ(a.record_once(name, "8", ec), "8");
    EXPECT_FALSE(ec) << dlock::last_error_message(ec);
    EXPECT_EQ(b.record_once(name, "16", ec), "8");
    EXPECT_FALSE(ec) << dlock::last_error_message(ec);
    // The lock named by the record name's first part is free.
    const auto base = name.substr(0, name.find('/'));
    auto l = b.acquire(base, {.lease = 10s, .wait = 0ms});
    EXPECT_EQ(keys_under(base + "/").size(), 1u);
}

/// Waits until `l` has been renewed `rounds` times (its expires_in() rising by more than
/// `step` each time), within `timeout`.
bool renewed_times(const dlock::lease& l, int rounds, std::chrono::milliseconds step,
                   std::chrono::milliseconds timeout) {
    int seen = 0;
    auto last = l.expires_in();
    return eventually(
        [&] {
            const auto now = l.expires_in();
            if (now > last + step) ++seen;
            last = now;
            return seen >= rounds;
        },
        timeout);
}

// One LeaseKeepAlive stream per client carries every keep-alive of every lock: renewals do not
// open streams (counted by the member's grpc_server_started_total).
TEST(EtcdSession, OneKeepAliveStreamServesEveryRenewal) {
    const auto ttl = std::chrono::ceil<std::chrono::seconds>(scaled(3s));
    auto c = shared_etcd_client(ttl);
    const auto before = shared_etcd().grpc_started(0, "LeaseKeepAlive");
    auto x = c.acquire(dlock::test::unique_name("etcd-ka-x"), {.lease = 10s});
    auto y = c.acquire(dlock::test::unique_name("etcd-ka-y"), {.lease = 10s});
    // Four keep-alive rounds (one each TTL/3), each raising the validity by about TTL/3.
    ASSERT_TRUE(renewed_times(x, 4, ttl / 6, 4 * ttl));
    const auto after = shared_etcd().grpc_started(0, "LeaseKeepAlive");
    EXPECT_LE(after - before, 1u) << "keep-alive streams opened over 4 renewal rounds";
    EXPECT_EQ(x.state(), dlock::lock_state::held);
    EXPECT_EQ(y.state(), dlock::lock_state::held);
}

// An administrator revokes the client's lease: the keep-alive answers TTL 0, every lock of the
// client is lost (lost_token, on_lost) and the next acquire runs under a new lease.
TEST(EtcdSession, ARevokedLeaseLosesEveryLockAndTheNextAcquireGetsANewLease) {
    const auto ttl = std::chrono::ceil<std::chrono::seconds>(scaled(3s));
    auto c = shared_etcd_client(ttl);
    const auto name = dlock::test::unique_name("etcd-revoke");
    std::atomic<int> on_lost{0};
    auto x = c.acquire(name + "-x", {.lease = 10s, .on_lost = [&](std::error_code) { ++on_lost; }});
    auto y = c.acquire(name + "-y", {.lease = 10s, .on_lost = [&](std::error_code) { ++on_lost; }});
    const auto key = c.key_of(x);
    const auto lease_hex = key.substr(key.rfind('/') + 1);
    ASSERT_EQ(shared_etcd().etcdctl({"lease", "revoke", lease_hex}).status, 0);
    EXPECT_TRUE(eventually([&] { return on_lost.load() == 2; }, ttl + scaled(5s)));
    EXPECT_TRUE(x.lost_token().stop_requested());
    EXPECT_TRUE(y.lost_token().stop_requested());
    EXPECT_EQ(x.state(), dlock::lock_state::lost);
    auto again = c.acquire(name + "-x", {.lease = 10s, .wait = scaled(5s)});
    const auto new_key = c.key_of(again);
    EXPECT_NE(new_key.substr(new_key.rfind('/') + 1), lease_hex);
    EXPECT_EQ(again.state(), dlock::lock_state::held);
    std::error_code ec;
    x.release(ec);  // lost: nothing to delete
    y.release(ec);
}

// A grant that fails names the member whose failure it reports, not the one the client moves on
// to. The member, paused after its lease was revoked, keeps its connection open and never
// answers the new LeaseGrant, which so fails at connect_timeout; the other member refuses at
// once. On a loaded machine the acquire can still find the session trusted (seen once in a full
// run with six test binaries at once; a keep-alive answered late, before the revoke, would do
// it): then it writes under that session and its lock step fails at command_timeout instead,
// and must name the member just the same.
TEST(EtcdSession, AFailedGrantNamesTheMemberThatFailed) {
    dlock::test::etcd_cluster etcd(1);
    const auto refusing = "127.0.0.1:" + std::to_string(dlock::test::free_port());
    const auto ttl = std::chrono::ceil<std::chrono::seconds>(scaled(3s));
    dlock::etcd::client c({.url = "etcd://" + etcd.endpoint(0) + "," + refusing,
                           .session_ttl = ttl,
                           .connect_timeout = scaled(4s),
                           .command_timeout = scaled(30s)});
    const auto name = dlock::test::unique_name("etcd-named");
    auto l = c.acquire(name, {.lease = 10s});
    const auto key = c.key_of(l);
    ASSERT_EQ(etcd.etcdctl({"lease", "revoke", key.substr(key.rfind('/') + 1)}).status, 0);
    ASSERT_TRUE(eventually([&] { return l.state() == dlock::lock_state::lost; }, ttl + 5s));
    etcd.pause(0);
    std::error_code ec;
    auto again = c.acquire(name, {.wait = 0ms}, ec);
    const auto message = dlock::last_error_message(ec);
    etcd.resume(0);
    EXPECT_FALSE(again);
    const auto named = "etcd " + etcd.endpoint(0) + ": ";
    EXPECT_TRUE(message.find(named + "lease grant failed") != std::string::npos ||
                message.find(named + "acquiring lock") != std::string::npos)
        << message;
    EXPECT_EQ(message.find(refusing), std::string::npos) << message;
    std::error_code ignored;
    l.release(ignored);
}

// A member slow to answer a new connection is still reached. Here a proxy in front of it holds
// each connection back for 1.5 s before passing bytes either way; on a loaded machine a member's
// own TCP and HTTP/2 handshake can take that long. gRPC gives each connection attempt at least
// its minimum reconnect backoff, so when the client set that to 100 ms every attempt was cut
// short ("tcp handshaker shutdown") and the client never connected (docs/etcd.md, "Connections").
TEST(EtcdConnect, AMemberSlowToAnswerANewConnectionIsStillReached) {
    // Not scaled: above the longest attempt the old setting allowed (its 1 s maximum backoff plus
    // jitter), well below the 5 s an attempt gets now.
    const auto hold = 1500ms;
    dlock::test::tap_detail::relay proxy(shared_etcd().client_port(0), [&](int client, int server) {
        const auto until = std::chrono::steady_clock::now() + hold;
        while (!proxy.stopping() && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(5ms);
        }
        char buf[16384];
        while (!proxy.stopping()) {
            pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
            if (::poll(p, 2, 20) <= 0) continue;
            const auto pass = [&](int from, int to) {
                const auto n = ::recv(from, buf, sizeof buf, 0);
                return n > 0 &&
                       dlock::test::tap_detail::write_all(to, buf, static_cast<std::size_t>(n));
            };
            if ((p[0].revents != 0 && !pass(client, server)) ||
                (p[1].revents != 0 && !pass(server, client))) {
                break;
            }
        }
        ::close(client);
        ::close(server);
    });
    dlock::etcd::client c({.url = "etcd://127.0.0.1:" + std::to_string(proxy.port()),
                           .connect_timeout = scaled(10s)});
    std::error_code ec;
    auto l = c.acquire(dlock::test::unique_name("etcd-slow-accept"), {.lease = 10s}, ec);
    ASSERT_TRUE(l) << ec.message() << ": " << dlock::last_error_message(ec);
    l.release();
}

// The single member restarts while a lock is held: the lock is uncertain while the stream is
// broken, then held again on one new stream; the key (and the lease) survive.
TEST(EtcdSession, TheStreamComesBackAfterTheMemberRestarts) {
    dlock::test::etcd_cluster etcd(1);
    const auto ttl = std::chrono::ceil<std::chrono::seconds>(scaled(6s));
    dlock::etcd::client c({.url = etcd.url(), .session_ttl = ttl, .connect_timeout = scaled(10s)});
    auto l = c.acquire(dlock::test::unique_name("etcd-restart"), {.lease = 10s});
    const auto token = l.fencing_token();
    etcd.stop(0);
    EXPECT_TRUE(eventually([&] { return l.state() == dlock::lock_state::uncertain; }, ttl));
    etcd.start(0);
    EXPECT_TRUE(eventually([&] { return l.state() == dlock::lock_state::held; }, ttl));
    // Renewals go on over the stream opened after the restart.
    const auto before = etcd.grpc_started(0, "LeaseKeepAlive");
    ASSERT_TRUE(renewed_times(l, 3, ttl / 6, 4 * ttl));
    EXPECT_LE(etcd.grpc_started(0, "LeaseKeepAlive") - before, 1u);
    EXPECT_EQ(l.state(), dlock::lock_state::held);
    EXPECT_EQ(l.fencing_token(), token);
    l.release();  // throws if the key is not ours any more
}

TEST(EtcdUrl, BadUrlsAreInvalidArguments) {
    for (const std::string url :
         {"etcd://", "etcd://h:0", "etcd://pw@h", "etcd://h?x=1", "redis://h", "etcd://h/a\x01"}) {
        try {
            dlock::etcd::client c({.url = url, .connect_timeout = scaled(10s)});
            ADD_FAILURE() << url << " accepted";
        } catch (const dlock::error& e) {
            EXPECT_EQ(e.code(), dlock::errc::invalid_argument) << url;
            EXPECT_EQ(std::string(e.what()).find("pw@"), std::string::npos) << e.what();
        }
    }
}

TEST(EtcdUrl, APrefixInTheUrlGoesBeforeTheName) {
    dlock::etcd::client c({.url = shared_etcd().url("app/locks"), .connect_timeout = scaled(10s)});
    EXPECT_EQ(c.key_prefix("n"), "app/locks/n/");
    auto l = c.acquire(dlock::test::unique_name("etcd-prefixed"), {.lease = 10s});
    EXPECT_EQ(c.key_of(l).rfind("app/locks/", 0), 0u) << c.key_of(l);
    EXPECT_EQ(shared_etcd_client().key_prefix("n"), "n/");
}

TEST(EtcdConnect, ConnectTakesEtcdUrls) {
    auto b = dlock::connect(shared_etcd().url());
    auto l = b->acquire(dlock::test::unique_name("etcd-connect"), {.lease = 10s});
    EXPECT_GT(l.fencing_token(), 0u);
    std::error_code ec;
    auto none = dlock::connect("etcd://127.0.0.1:" + std::to_string(dlock::test::free_port()),
                               {.connect_timeout = 300ms})
                    ->acquire("x", {.lease = 10s, .wait = 0ms}, ec);
    EXPECT_EQ(ec, dlock::errc::connection_failed) << dlock::last_error_message(ec);
}

}  // namespace
