// The etcd backend's kinds beyond etcd's own lock recipe (docs/etcd.md, "Kinds") against one
// private etcd member: readers and writers (also against the real `etcdctl lock`), the semaphore
// (never oversubscribed, the next waiter woken, set_permits), re-entry, one kind per name, and
// inspect. The conformance suite runs every kind too (conformance_etcd_test); these are the
// safety properties of their own, each written to fail on broken queue logic.
#include <dlock/dlock.hpp>
#include <dlock/etcd/client.hpp>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "etcd_server.hpp"
#include "spawn.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::lock_kind;
using dlock::test::eventually;
using dlock::test::read_text;
using dlock::test::scaled;
using dlock::test::shared_etcd;
using dlock::test::shared_etcd_client;

std::size_t keys_under(const std::string& prefix) { return shared_etcd().count(prefix); }

dlock::lease try_now(dlock::etcd::client& c, const std::string& name, dlock::lock_request r,
                     std::error_code& ec) {
    return c.acquire(name, r, {.lease = 10s, .wait = 0ms}, ec);
}

const dlock::lock_request read{.kind = lock_kind::read};
const dlock::lock_request write{.kind = lock_kind::write};

dlock::lock_request permits(std::uint32_t count, std::uint32_t limit) {
    return {.kind = lock_kind::permits, .count = count, .limit = limit};
}

// Readers share; a writer waits for them; a reader behind a waiting writer waits too (the
// writer's turn comes first); a holding writer keeps every reader out.
TEST(EtcdKinds, ReadersShareAndNeverHoldWithAWriter) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    auto c = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-rw");
    std::error_code ec;
    auto r1 = try_now(a, name, read, ec);
    ASSERT_TRUE(r1) << dlock::last_error_message(ec);
    auto r2 = try_now(b, name, read, ec);
    ASSERT_TRUE(r2) << "readers share: " << dlock::last_error_message(ec);
    auto w = try_now(c, name, write, ec);
    EXPECT_FALSE(w) << "a writer granted beside two readers";
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock::last_error_message(ec);
    // A writer queued behind the readers: a later reader queues behind it.
    std::atomic<bool> writer_held{false};
    std::thread writer([&] {
        auto l = c.acquire(name, write, {.lease = 10s, .wait = scaled(20s)});
        writer_held = true;
        std::this_thread::sleep_for(50ms);
    });
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 3; }, scaled(10s)));
    auto late = try_now(a, name, read, ec);
    EXPECT_FALSE(late) << "a reader passed a waiting writer";
    if (late) late.release();
    r1.release();
    EXPECT_FALSE(writer_held.load());
    r2.release();
    writer.join();
    EXPECT_TRUE(writer_held.load());
    // A holding writer excludes readers.
    auto held = c.acquire(name, write, {.lease = 10s, .wait = scaled(20s)});
    auto none = try_now(a, name, read, ec);
    EXPECT_FALSE(none) << "a reader granted beside a writer";
    if (none) none.release();
    held.release();
    auto after = try_now(a, name, read, ec);
    EXPECT_TRUE(after) << dlock::last_error_message(ec);
}

// Threads of four clients, readers and writers mixed: a writer is never inside with anyone.
TEST(EtcdKinds, ReadersAndWritersUnderContention) {
    const auto name = dlock::test::unique_name("etcd-rw-many");
    std::atomic<int> readers{0}, writers{0}, violations{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            auto c = shared_etcd_client();
            const bool writer = t % 2 == 0;
            for (int i = 0; i < 8; ++i) {
                auto l =
                    c.acquire(name, writer ? write : read, {.lease = 10s, .wait = scaled(30s)});
                if (writer) {
                    if (writers.fetch_add(1) != 0 || readers.load() != 0) ++violations;
                } else {
                    readers.fetch_add(1);
                    if (writers.load() != 0) ++violations;
                }
                std::this_thread::sleep_for(2ms);
                (writer ? writers : readers).fetch_sub(1);
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(violations.load(), 0);
}

// etcd's own lock recipe (`etcdctl lock`, a Go concurrency.Mutex) is a writer to dlock: it keeps
// dlock's readers and writers out, and a dlock reader keeps etcdctl out.
TEST(EtcdKinds, EtcdctlLockExcludesReadersAndWriters) {
    auto c = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-rw-interop");
    const dlock::test::temp_dir tmp("dlock-etcd-kinds");
    const std::string dir = tmp.path();
    {
        const std::string out_path = dir + "/out";
        const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_GE(out, 0);
        const auto argv = shared_etcd().etcdctl_argv({"lock", name});
        const pid_t pid = dlock::test::detail::spawn(argv.front(), argv, out);
        ::close(out);
        ASSERT_TRUE(
            eventually([&] { return read_text(out_path).find(name + "/") == 0; }, scaled(10s)));
        std::error_code ec;
        EXPECT_FALSE(try_now(c, name, read, ec)) << "a reader granted while etcdctl holds";
        EXPECT_EQ(ec, dlock::errc::timeout) << dlock::last_error_message(ec);
        EXPECT_FALSE(try_now(c, name, write, ec)) << "a writer granted while etcdctl holds";
        std::atomic<bool> got{false};
        std::thread reader([&] {
            auto l = c.acquire(name, read, {.lease = 10s, .wait = scaled(20s)});
            got = true;
        });
        ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 2; }, scaled(10s)));
        EXPECT_FALSE(got.load());
        ::kill(pid, SIGINT);
        int raw = 0;
        ASSERT_TRUE(dlock::test::detail::wait_for(pid, scaled(10s), raw));
        reader.join();
        EXPECT_TRUE(got.load());
        ::unlink(out_path.c_str());
    }
    {
        const std::string marker = dir + "/held";
        auto r = c.acquire(name, read, {.lease = 10s});
        const auto argv =
            shared_etcd().etcdctl_argv({"lock", name, "--", "/usr/bin/touch", marker});
        const pid_t pid = dlock::test::detail::spawn(argv.front(), argv, -1);
        ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 2; }, scaled(10s)));
        EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "etcdctl ran while a dlock reader held";
        r.release();
        int raw = 0;
        ASSERT_TRUE(dlock::test::detail::wait_for(pid, scaled(20s), raw));
        EXPECT_EQ(dlock::test::detail::decode_status(raw), 0);
        EXPECT_EQ(::access(marker.c_str(), F_OK), 0);
        ::unlink(marker.c_str());
    }
}

// Grants in queue order while the running sum of their counts fits: never more permits held than
// the limit, under contention of several clients taking 1 or 2 permits.
TEST(EtcdKinds, PermitsAreNeverOversubscribed) {
    const auto name = dlock::test::unique_name("etcd-sem");
    constexpr int limit = 3;
    {
        auto a = shared_etcd_client();
        auto b = shared_etcd_client();
        std::error_code ec;
        auto two = try_now(a, name, permits(2, limit), ec);
        ASSERT_TRUE(two) << dlock::last_error_message(ec);
        auto one = try_now(b, name, permits(1, limit), ec);
        ASSERT_TRUE(one) << dlock::last_error_message(ec);
        auto more = try_now(b, name, permits(1, limit), ec);
        EXPECT_FALSE(more) << "a fourth permit of three";
        EXPECT_EQ(ec, dlock::errc::timeout) << dlock::last_error_message(ec);
    }
    std::atomic<int> in_use{0}, most{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            auto c = shared_etcd_client();
            const std::uint32_t count = t % 2 == 0 ? 2 : 1;
            for (int i = 0; i < 8; ++i) {
                auto l =
                    c.acquire(name, permits(count, limit), {.lease = 10s, .wait = scaled(30s)});
                const int now = in_use.fetch_add(static_cast<int>(count)) + static_cast<int>(count);
                int seen = most.load();
                while (now > seen && !most.compare_exchange_weak(seen, now)) {
                }
                std::this_thread::sleep_for(2ms);
                in_use.fetch_sub(static_cast<int>(count));
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_LE(most.load(), limit) << "permits oversubscribed";
    EXPECT_EQ(keys_under(name + "/"), 0u);
}

// Two waiters fit once the holder releases: the first in line is woken by the release, and, now
// holding, tells the one behind it (which watches only its predecessor's key) to look again.
TEST(EtcdKinds, TheWaiterBehindANewSemaphoreHolderIsWoken) {
    const auto name = dlock::test::unique_name("etcd-sem-wake");
    // Waiters whose leases outlast the test: only a notification wakes them in time.
    auto h = shared_etcd_client();
    auto b = shared_etcd_client(120s);
    auto c = shared_etcd_client(120s);
    auto held = h.acquire(name, permits(2, 2), {.lease = 10s});
    std::atomic<bool> first{false}, second{false};
    std::atomic<bool> done{false};
    std::thread w1([&] {
        auto l = b.acquire(name, permits(1, 2), {.lease = 10s, .wait = scaled(30s)});
        first = true;
        while (!done.load()) std::this_thread::sleep_for(1ms);
    });
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 2; }, scaled(10s)));
    std::thread w2([&] {
        auto l = c.acquire(name, permits(1, 2), {.lease = 10s, .wait = scaled(30s)});
        second = true;
    });
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 3; }, scaled(10s)));
    held.release();
    EXPECT_TRUE(eventually([&] { return first.load(); }, scaled(10s)));
    EXPECT_TRUE(eventually([&] { return second.load(); }, scaled(10s)))
        << "the second waiter was not woken while the first holds";
    done = true;
    w1.join();
    w2.join();
}

// A new number of permits wakes the waiter first in line (it watches the permits key).
TEST(EtcdKinds, SetPermitsWakesTheFirstWaiter) {
    const auto name = dlock::test::unique_name("etcd-sem-set");
    auto a = shared_etcd_client();
    auto b = shared_etcd_client(120s);  // only a notification wakes it in time
    auto held = a.acquire(name, permits(1, 1), {.lease = 10s});
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        auto l = b.acquire(name, permits(1, 1), {.lease = 10s, .wait = scaled(30s)});
        got = true;
    });
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 2; }, scaled(10s)));
    EXPECT_FALSE(got.load());
    a.set_permits(name, 2);
    EXPECT_TRUE(eventually([&] { return got.load(); }, scaled(10s)));
    waiter.join();
    const auto info = a.inspect(name);
    EXPECT_EQ(info.type, dlock::lock_type::counting_semaphore);
    EXPECT_EQ(info.permit_limit, 2u);
    std::error_code ec;
    a.set_permits(name, 0, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
}

// Nothing of an idle semaphore stays in etcd: the release of the last key under its prefix
// deletes the permits key in the same Txn. While a holder or a waiter is left, the number stays
// (a release must not hand the next acquire a fresh number while permits are in use).
TEST(EtcdKinds, TheLastReleaseTakesThePermitsKeyAlong) {
    const auto name = dlock::test::unique_name("etcd-sem-idle");
    std::string permits_key = "/dlock-permits-";  // docs/etcd.md, "Semaphore" (no URL prefix)
    for (const char ch : name) {
        constexpr char hex[] = "0123456789abcdef";
        permits_key += hex[static_cast<unsigned char>(ch) >> 4];
        permits_key += hex[static_cast<unsigned char>(ch) & 15];
    }
    auto a = shared_etcd_client();
    auto b = shared_etcd_client(120s);
    std::error_code ec;
    auto first = try_now(a, name, permits(1, 1), ec);
    ASSERT_TRUE(first) << dlock::last_error_message(ec);
    ASSERT_EQ(keys_under(permits_key), 1u);
    std::atomic<bool> got{false}, done{false};
    std::thread waiter([&] {
        auto l = b.acquire(name, permits(1, 1), {.lease = 10s, .wait = scaled(30s)});
        got = true;
        while (!done.load()) std::this_thread::sleep_for(1ms);
    });
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 2; }, scaled(10s)));
    first.release();
    ASSERT_TRUE(eventually([&] { return got.load(); }, scaled(10s)));
    EXPECT_EQ(keys_under(permits_key), 1u) << "the number went while the waiter holds";
    done = true;
    waiter.join();  // its release is the last
    EXPECT_EQ(keys_under(name + "/"), 0u);
    EXPECT_EQ(keys_under(permits_key), 0u) << "the permits key outlived the semaphore's last key";
    EXPECT_FALSE(a.inspect(name).permit_limit.has_value());
    // A try that fails deletes its own key only: the holder's number stays.
    auto again = try_now(a, name, permits(1, 1), ec);
    ASSERT_TRUE(again) << dlock::last_error_message(ec);
    auto refused = try_now(b, name, permits(1, 1), ec);
    EXPECT_FALSE(refused);
    EXPECT_EQ(keys_under(permits_key), 1u) << "a failed try took the holder's number";
    again.release();
    EXPECT_EQ(keys_under(name + "/"), 0u);
    EXPECT_EQ(keys_under(permits_key), 0u);
}

// recursive_mutex: every level is the one etcdctl key; the key goes with the last level.
TEST(EtcdKinds, ReentryLevelsShareOneKey) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-reentrant");
    dlock::recursive_mutex m(a, name);
    m.lock();
    const auto token = m.fencing_token();
    m.lock();
    EXPECT_EQ(m.depth(), 2u);
    EXPECT_EQ(m.fencing_token(), token);
    EXPECT_EQ(keys_under(name + "/"), 1u);
    std::error_code ec;
    EXPECT_FALSE(b.acquire(name, {.kind = lock_kind::reentrant}, {.wait = 0ms}, ec));
    m.unlock();
    EXPECT_EQ(keys_under(name + "/"), 1u) << "one level left: the key stays";
    EXPECT_FALSE(b.acquire(name, {.kind = lock_kind::reentrant}, {.wait = 0ms}, ec));
    m.unlock();
    EXPECT_EQ(keys_under(name + "/"), 0u);
    auto other = b.acquire(name, {.kind = lock_kind::reentrant}, {.wait = 0ms}, ec);
    EXPECT_TRUE(other) << dlock::last_error_message(ec);
    EXPECT_GT(other.fencing_token(), token);
}

// One name, one kind: a semaphore on a name with a lock's keys (dlock's or etcdctl's), or a lock
// on a semaphore's, is refused and leaves nothing behind.
TEST(EtcdKinds, ANameServesOneKind) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-one-kind");
    {
        auto sem = a.acquire(name, permits(1, 2), {.lease = 10s});
        std::error_code ec;
        EXPECT_FALSE(try_now(b, name, {}, ec));
        EXPECT_EQ(ec, dlock::errc::unexpected_reply) << dlock::last_error_message(ec);
        EXPECT_NE(dlock::last_error_message(ec).find(
                      "is used as a counting_semaphore; a name serves one kind"),
                  std::string::npos)
            << dlock::last_error_message(ec);
        EXPECT_EQ(keys_under(name + "/"), 1u);
    }
    const auto argv = shared_etcd().etcdctl_argv({"lock", name});  // holds until SIGINT
    const int out = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const pid_t pid = dlock::test::detail::spawn(argv.front(), argv, out);
    ::close(out);
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 1; }, scaled(10s)));
    std::error_code ec;
    EXPECT_FALSE(try_now(b, name, permits(1, 2), ec));
    EXPECT_EQ(ec, dlock::errc::unexpected_reply) << dlock::last_error_message(ec);
    EXPECT_EQ(keys_under(name + "/"), 1u);
    ::kill(pid, SIGINT);
    int raw = 0;
    EXPECT_TRUE(dlock::test::detail::wait_for(pid, scaled(10s), raw));
}

// inspect reads the queue by the recipe's rules.
TEST(EtcdKinds, InspectShowsHoldersAndWaiters) {
    auto a = shared_etcd_client();
    auto b = shared_etcd_client();
    auto c = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-inspect");
    EXPECT_EQ(a.inspect(name).type, dlock::lock_type::none);
    auto r1 = a.acquire(name, read, {.lease = 10s});
    auto r2 = b.acquire(name, read, {.lease = 10s});
    std::thread writer(
        [&] { auto l = c.acquire(name, write, {.lease = 10s, .wait = scaled(20s)}); });
    ASSERT_TRUE(eventually([&] { return keys_under(name + "/") == 3; }, scaled(10s)));
    auto info = a.inspect(name);
    EXPECT_EQ(info.type, dlock::lock_type::shared_mutex);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.readers, 2u);
    EXPECT_FALSE(info.writer);
    EXPECT_EQ(info.waiters, 1u);
    EXPECT_EQ(info.fencing_counter, r2.fencing_token());
    r1.release();
    r2.release();
    writer.join();
    EXPECT_EQ(a.inspect(name).type, dlock::lock_type::none);

    const auto sem = dlock::test::unique_name("etcd-inspect-sem");
    auto p = a.acquire(sem, permits(2, 3), {.lease = 10s});
    info = b.inspect(sem);
    EXPECT_EQ(info.type, dlock::lock_type::counting_semaphore);
    EXPECT_EQ(info.holders, 1u);
    EXPECT_EQ(info.permits_in_use, 2u);
    EXPECT_EQ(info.permit_limit, 3u);
    EXPECT_EQ(info.fencing_counter, p.fencing_token());
}

// backend::watch reports a change made after it was set, and times out when nothing changes.
TEST(EtcdKinds, WatchReportsChanges) {
    auto a = shared_etcd_client();
    const auto name = dlock::test::unique_name("etcd-watch");
    std::error_code ec;
    auto w = a.watch(name, ec);
    ASSERT_TRUE(w) << dlock::last_error_message(ec);
    EXPECT_FALSE(w->wait_until(std::chrono::steady_clock::now() + 100ms, ec));
    EXPECT_FALSE(ec) << dlock::last_error_message(ec);
    auto l = a.acquire(name, {.lease = 10s});  // before the wait: seen from the revision on
    EXPECT_TRUE(w->wait_until(std::chrono::steady_clock::now() + scaled(10s), ec));
    EXPECT_FALSE(ec) << dlock::last_error_message(ec);
    l.release();
    EXPECT_TRUE(w->wait_until(std::chrono::steady_clock::now() + scaled(10s), ec));
}

}  // namespace
