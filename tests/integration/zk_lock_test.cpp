// The ZooKeeper backend against one private standalone server (docs/zookeeper.md): mutual
// exclusion across threads and processes, FIFO service, timeouts that leave no node behind,
// fencing tokens, read/write and re-entrant grants, max_hold, digest ACLs and bad input.
#include <dlock/dlock.hpp>
#include <dlock/mutex.hpp>
#include <dlock/recursive_mutex.hpp>
#include <dlock/semaphore.hpp>
#include <dlock/shared_mutex.hpp>
#include <dlock/zk/client.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <zookeeper/proto.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <functional>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "core/lease_core.hpp"
#include "moved_from.hpp"
#include "test_env.hpp"
#include "zk/recipe.hpp"
#include "zk_server.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_zk;
using steady = std::chrono::steady_clock;

dlock::zk::client make_client(dlock::observer observer = {}) {
    return dlock::zk::client({.url = shared_zk().url("/dlock-it"),
                              .session_timeout = 4s,
                              .connect_timeout = scaled(5s),
                              .observer = std::move(observer)});
}

dlock::lease take(dlock::zk::client& zk, const std::string& name, dlock::lock_kind kind,
                  std::chrono::milliseconds wait, std::error_code& ec,
                  const dlock::lease* reenter = nullptr, dlock::lock_options options = {}) {
    return zk.acquire_until(name, dlock::lock_request{.kind = kind, .reenter = reenter}, options,
                            steady::now() + wait, ec);
}

TEST(ZkLock, WaitersAreServedInArrivalOrder) {
    std::mutex m;
    int waits_started = 0;
    auto zk = make_client([&](const dlock::lock_event& e) {
        if (e.kind != dlock::event_kind::wait_started) return;
        std::lock_guard lock(m);
        ++waits_started;
    });
    const auto name = dlock::test::unique_name("fifo");
    std::error_code ec;
    auto holder = take(zk, name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    std::vector<int> order;
    std::vector<std::jthread> waiters;
    constexpr int n = 5;
    for (int i = 0; i < n; ++i) {
        waiters.emplace_back([&, i] {
            std::error_code wec;
            auto l = take(zk, name, i % 2 ? dlock::lock_kind::fair : dlock::lock_kind::exclusive,
                          scaled(30s), wec);
            std::lock_guard lock(m);
            if (!wec) order.push_back(i);
        });
        // The next waiter starts only once this one's node is queued.
        ASSERT_TRUE(eventually(
            [&] {
                std::lock_guard lock(m);
                return waits_started == i + 1;
            },
            10s));
    }
    holder.release();
    waiters.clear();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(ZkLock, TimeoutLeavesNoNode) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("timeout");
    std::error_code ec;
    auto holder = take(zk, name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec);
    const auto started = steady::now();
    auto l = take(other, name, dlock::lock_kind::exclusive, 300ms, ec);
    const auto took = steady::now() - started;
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_FALSE(l);
    EXPECT_GE(took, 300ms);
    EXPECT_LT(took, 300ms + scaled(2s));
    // A past deadline: exactly one attempt.
    l = take(other, name, dlock::lock_kind::exclusive, -5ms, ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    // max_attempts = 1: one check.
    l = other.acquire_until(name, {}, {.max_attempts = 1}, steady::now() + 10s, ec);
    EXPECT_EQ(ec, dlock::errc::attempts_exhausted);
    // Canceled: nothing left either.
    std::stop_source stop;
    std::jthread canceler([&] {
        std::this_thread::sleep_for(100ms);
        stop.request_stop();
    });
    l = other.acquire_until(name, {}, {.cancel = stop.get_token()}, steady::now() + 10s, ec);
    EXPECT_EQ(ec, dlock::errc::canceled);
    const auto left = shared_zk().children(zk.lock_path(name));
    ASSERT_EQ(left.size(), 1u) << "only the holder's node may remain";
    holder.release();
    EXPECT_TRUE(shared_zk().children(zk.lock_path(name)).empty());
    l = take(other, name, dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_FALSE(ec);
}

// A waiter whose watched node goes takes the lock without reading the children again only when
// that node was the last one ahead of its own (docs/zookeeper.md, "The recipe", step 4); one
// further back also watches the node before its predecessor and looks again when that goes. The
// line here: the holder, `left` (gives up while the holder holds), `middle`, `back`. Left going is
// no grant for middle: it reads again and waits for the holder. Back watched left as the node
// before its predecessor: it looks again and now watches the holder as that node. Then each is
// served in turn, never two at once.
TEST(ZkLock, AWaiterAheadThatLeavesIsNoGrantForThoseBehind) {
    std::atomic<int> holding{0};
    std::atomic<bool> overlap{false}, middle_granted{false}, back_granted{false};
    std::atomic<bool> release_middle{false};
    const auto granted = [&](std::atomic<bool>& flag) {
        return make_client([&](const dlock::lock_event& e) {
            if (e.kind == dlock::event_kind::acquired) flag = true;
        });
    };
    auto holder_client = make_client();
    auto left_client = make_client();
    auto middle_client = granted(middle_granted);
    auto back_client = granted(back_granted);
    const auto name = dlock::test::unique_name("ahead-leaves");
    const auto parent = holder_client.lock_path(name);
    std::error_code ec;
    auto holder = take(holder_client, name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    ++holding;
    const auto holder_node = parent + "/" + shared_zk().children(parent).at(0);
    // The n-th node in sequence order, once there are n + 1.
    const auto node_at = [&](std::size_t n) {
        std::vector<std::string> queued;
        EXPECT_TRUE(eventually(
            [&] { return (queued = shared_zk().children(parent)).size() == n + 1; }, scaled(10s)));
        std::sort(queued.begin(), queued.end(), [](const std::string& a, const std::string& b) {
            return dlock::zk::detail::parse_node(a)->sequence <
                   dlock::zk::detail::parse_node(b)->sequence;
        });
        return parent + "/" + queued.at(n);
    };
    // Watches on a node, counted one per session by `wchp`. A waiter watches its own node from its
    // first wait on (to hear a deletion by someone else), and a watch stays until it fires, even
    // after its waiter gave up or stopped waiting for it.
    const auto watched_by = [&](const std::string& node, std::size_t sessions) {
        return eventually([&] { return shared_zk().watchers(node) == sessions; }, scaled(10s));
    };
    ASSERT_TRUE(watched_by(holder_node, 1)) << "the holder's own";

    std::stop_source leave;
    std::jthread left([&] {
        std::error_code lec;
        auto l = left_client.acquire_until(name, {}, {.cancel = leave.get_token()},
                                           steady::now() + scaled(30s), lec);
        EXPECT_EQ(lec, dlock::errc::canceled);
    });
    const auto left_node = node_at(1);
    ASSERT_TRUE(watched_by(holder_node, 2)) << "left's predecessor";
    const auto serve = [&](dlock::lease& l) {
        if (holding.fetch_add(1) != 0) overlap = true;
        return [&] {
            --holding;
            l.release();
        };
    };
    std::jthread middle([&] {
        std::error_code mec;
        auto l = take(middle_client, name, dlock::lock_kind::exclusive, scaled(30s), mec);
        ASSERT_FALSE(mec) << mec.message();
        const auto done = serve(l);
        EXPECT_TRUE(eventually([&] { return release_middle.load(); }, scaled(30s)));
        done();
    });
    const auto middle_node = node_at(2);
    ASSERT_TRUE(watched_by(left_node, 2)) << "left's own, middle's predecessor";
    ASSERT_TRUE(watched_by(holder_node, 3)) << "middle's node before its predecessor";
    std::jthread back([&] {
        std::error_code bec;
        auto l = take(back_client, name, dlock::lock_kind::exclusive, scaled(30s), bec);
        ASSERT_FALSE(bec) << bec.message();
        serve(l)();
    });
    node_at(3);
    ASSERT_TRUE(watched_by(middle_node, 2)) << "middle's own, back's predecessor";
    ASSERT_TRUE(watched_by(left_node, 3)) << "back's node before its predecessor";

    leave.request_stop();
    left.join();
    ASSERT_TRUE(watched_by(holder_node, 4))
        << "back did not look again when the node before its predecessor went";
    EXPECT_FALSE(middle_granted) << "granted while the holder still held the lock";
    EXPECT_FALSE(back_granted) << "granted while the holder still held the lock";
    --holding;
    holder.release();
    ASSERT_TRUE(eventually([&] { return middle_granted.load(); }, scaled(10s)));
    EXPECT_FALSE(back_granted) << "granted while middle held the lock";
    release_middle = true;
    middle.join();
    back.join();
    EXPECT_TRUE(back_granted);
    EXPECT_FALSE(overlap) << "two holders at once";
}

TEST(ZkLock, FencingTokensRise) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("fence");
    std::uint64_t last = 0;
    for (int i = 0; i < 10; ++i) {
        std::error_code ec;
        auto l = take(i % 2 ? zk : other, name, dlock::lock_kind::exclusive, 5s, ec);
        ASSERT_FALSE(ec);
        EXPECT_GT(l.fencing_token(), last);
        last = l.fencing_token();
        EXPECT_EQ(l.state(), dlock::lock_state::held);
        EXPECT_GT(l.expires_in(), 1s);
    }
}

TEST(ZkLock, ReadersShareWritersExclude) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("rw");
    std::error_code ec;
    auto r1 = take(zk, name, dlock::lock_kind::read, 0ms, ec);
    ASSERT_FALSE(ec);
    auto r2 = take(other, name, dlock::lock_kind::read, 0ms, ec);
    ASSERT_FALSE(ec) << "readers are concurrent";
    auto w = take(other, name, dlock::lock_kind::write, 200ms, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a writer waits for readers";
    // A queued writer: later readers wait behind it.
    std::atomic<bool> writer_in{false};
    std::atomic<std::uint64_t> writer_token{0};
    std::jthread writer([&] {
        std::error_code wec;
        auto l = take(other, name, dlock::lock_kind::write, scaled(20s), wec);
        if (wec) return;
        writer_token = l.fencing_token();
        writer_in = true;
        std::this_thread::sleep_for(200ms);
    });
    ASSERT_TRUE(
        eventually([&] { return shared_zk().children(zk.lock_path(name)).size() == 3; }, 10s));
    auto r3 = take(zk, name, dlock::lock_kind::read, 200ms, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "a reader after a queued writer waits";
    auto mutex_side = take(zk, name, dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "exclusive and write share one queue";
    EXPECT_FALSE(writer_in.load());
    const auto reader_token = std::max(r1.fencing_token(), r2.fencing_token());
    r1.release();
    r2.release();
    ASSERT_TRUE(eventually([&] { return writer_in.load(); }, 10s));
    EXPECT_GT(writer_token.load(), reader_token);
    auto r4 = take(zk, name, dlock::lock_kind::read, scaled(10s), ec);
    EXPECT_FALSE(ec) << "readers get it once the writer is gone";
    if (r4) {
        EXPECT_GT(r4.fencing_token(), writer_token.load());
    }
}

TEST(ZkLock, ReentrantLevelsShareOneNode) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("re");
    std::error_code ec;
    auto outer = take(zk, name, dlock::lock_kind::reentrant, 0ms, ec);
    ASSERT_FALSE(ec);
    auto inner = take(zk, name, dlock::lock_kind::reentrant, 0ms, ec, &outer);
    ASSERT_FALSE(ec);
    EXPECT_EQ(inner.fencing_token(), outer.fencing_token());
    EXPECT_EQ(shared_zk().children(zk.lock_path(name)).size(), 1u);
    // Re-entering another client's or another lock's lease is refused.
    auto bad = take(other, name, dlock::lock_kind::reentrant, 0ms, ec, &outer);
    EXPECT_EQ(ec, dlock::errc::not_owner);
    bad = take(zk, name + "x", dlock::lock_kind::reentrant, 0ms, ec, &outer);
    EXPECT_EQ(ec, dlock::errc::not_owner);
    outer.release();
    auto l = take(other, name, dlock::lock_kind::reentrant, 100ms, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "one level is still held";
    EXPECT_NE(inner.state(), dlock::lock_state::lost);
    inner.release();
    EXPECT_TRUE(shared_zk().children(zk.lock_path(name)).empty());
    l = take(other, name, dlock::lock_kind::reentrant, 0ms, ec);
    EXPECT_FALSE(ec);
}

TEST(ZkLock, ReentrantLevelsReleasedAtOnceAreBothClean) {
    // Two levels of one node released by two threads at the same moment: one deletes the node,
    // and the other must still see its own release as clean (it decided "a level stays" under
    // the engine's lock), not as a loss of a node someone else deleted.
    auto zk = make_client();
    const auto name = dlock::test::unique_name("re2");
    for (int round = 0; round < 20; ++round) {
        std::error_code ec;
        auto outer = take(zk, name, dlock::lock_kind::reentrant, 5s, ec);
        ASSERT_FALSE(ec) << ec.message();
        auto inner = take(zk, name, dlock::lock_kind::reentrant, 0ms, ec, &outer);
        ASSERT_FALSE(ec) << ec.message();
        std::latch go(2);
        std::error_code outer_ec, inner_ec;
        std::jthread a([&] {
            go.arrive_and_wait();
            outer.release(outer_ec);
        });
        std::jthread b([&] {
            go.arrive_and_wait();
            inner.release(inner_ec);
        });
        a.join();
        b.join();
        ASSERT_FALSE(outer_ec) << "round " << round << ": " << outer_ec.message();
        ASSERT_FALSE(inner_ec) << "round " << round << ": " << inner_ec.message();
        ASSERT_TRUE(shared_zk().children(zk.lock_path(name)).empty()) << "round " << round;
    }
}

TEST(ZkLock, GrantsCarryTheirKind) {
    // The lease's kind is what the grant was asked for (a re-entry checks it): every kind, and a
    // re-entry level, not "exclusive" for all.
    auto zk = make_client();
    const auto kind_of = [](const dlock::lease& l) {
        return dlock::detail::lease_access::core(l)->kind();
    };
    for (const auto kind :
         {dlock::lock_kind::exclusive, dlock::lock_kind::reentrant, dlock::lock_kind::fair,
          dlock::lock_kind::read, dlock::lock_kind::write, dlock::lock_kind::permits}) {
        const auto name = dlock::test::unique_name("kind");
        std::error_code ec;
        auto l = take(zk, name, kind, 0ms, ec);
        ASSERT_FALSE(ec) << dlock::to_string(kind);
        EXPECT_EQ(kind_of(l), kind) << dlock::to_string(kind);
        if (kind == dlock::lock_kind::reentrant) {
            auto inner = take(zk, name, kind, 0ms, ec, &l);
            ASSERT_FALSE(ec);
            EXPECT_EQ(kind_of(inner), kind) << "a re-entry level";
        }
    }
}

TEST(ZkLock, ReenteringAPlainMutexLeaseIsRefused) {
    // Only a re-entrant grant has levels: a plain (or fair, or write) grant of the same name on
    // the same client is not an owner to re-enter, and no level is added to its node.
    auto zk = make_client();
    for (const auto kind : {dlock::lock_kind::exclusive, dlock::lock_kind::fair,
                            dlock::lock_kind::write, dlock::lock_kind::read}) {
        const auto name = dlock::test::unique_name("plain");
        std::error_code ec;
        auto plain = take(zk, name, kind, 0ms, ec);
        ASSERT_FALSE(ec);
        auto level = take(zk, name, dlock::lock_kind::reentrant, 0ms, ec, &plain);
        EXPECT_EQ(ec, dlock::errc::not_owner) << dlock::to_string(kind);
        EXPECT_FALSE(level);
        plain.release(ec);
        EXPECT_FALSE(ec);
        EXPECT_TRUE(shared_zk().children(zk.lock_path(name)).empty())
            << "the release took the node: no level was left on it";
    }
    // reenter belongs to the reentrant kind only.
    const auto name = dlock::test::unique_name("plain");
    std::error_code ec;
    auto outer = take(zk, name, dlock::lock_kind::reentrant, 0ms, ec);
    ASSERT_FALSE(ec);
    auto l = take(zk, name, dlock::lock_kind::exclusive, 0ms, ec, &outer);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_FALSE(l);
}

TEST(ZkLock, MaxHoldDeletesTheNode) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("maxhold");
    std::error_code ec;
    const auto granted = steady::now();  // before the request: the cap counts from its send
    auto l = zk.acquire_until(name, {}, {.max_hold = 300ms}, steady::now(), ec);
    ASSERT_FALSE(ec);
    EXPECT_LE(l.expires_in(), 300ms);
    auto next = take(other, name, dlock::lock_kind::exclusive, scaled(10s), ec);
    ASSERT_FALSE(ec);
    EXPECT_GE(steady::now() - granted, 290ms);
    EXPECT_TRUE(l.lost_token().stop_requested());
    EXPECT_EQ(l.state(), dlock::lock_state::lost);
    l.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    // renew = false: a fixed lease of `lease`.
    next.release();
    l = zk.acquire_until(name, {}, {.lease = 300ms, .renew = false}, steady::now(), ec);
    ASSERT_FALSE(ec);
    EXPECT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 5s));
    EXPECT_TRUE(eventually([&] { return shared_zk().children(zk.lock_path(name)).empty(); }, 5s));
}

TEST(ZkLock, NodeDeletedBySomeoneElseIsLost) {
    auto zk = make_client();
    const auto name = dlock::test::unique_name("deleted");
    std::error_code ec;
    auto l = take(zk, name, dlock::lock_kind::reentrant, 0ms, ec);
    ASSERT_FALSE(ec);
    auto inner = take(zk, name, dlock::lock_kind::reentrant, 0ms, ec, &l);
    ASSERT_FALSE(ec);
    const auto kids = shared_zk().children(zk.lock_path(name));
    ASSERT_EQ(kids.size(), 1u);
    ASSERT_TRUE(shared_zk().remove(zk.lock_path(name) + "/" + kids.front()));
    EXPECT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 5s));
    EXPECT_TRUE(eventually([&] { return inner.lost_token().stop_requested(); }, 5s));
    EXPECT_EQ(l.state(), dlock::lock_state::lost);
    inner.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    l.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    auto again = take(zk, name, dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_FALSE(ec) << "the lock is free again";
}

// The watch on a held node is one-shot: a data change (an administrator's set) uses it up. It
// must be set again, so that a later delete still makes the lease lost; and a node found gone
// when the watch is set again counts as deleted.
void expect_lost_after(const std::function<void(const std::string& node)>& tamper) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("tampered");
    std::error_code ec;
    auto l = take(zk, name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec);
    const auto kids = shared_zk().children(zk.lock_path(name));
    ASSERT_EQ(kids.size(), 1u);
    tamper(zk.lock_path(name) + "/" + kids.front());
    auto next = take(other, name, dlock::lock_kind::exclusive, scaled(5s), ec);
    ASSERT_FALSE(ec) << "the node is gone: another client gets the lock";
    const auto granted = steady::now();
    EXPECT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 5s))
        << "the holder still believes it holds while another client was granted";
    EXPECT_LT(steady::now() - granted, scaled(2s));
    EXPECT_EQ(l.state(), dlock::lock_state::lost);
    l.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
}

TEST(ZkLock, NodeChangedThenDeletedBySomeoneElseIsLost) {
    expect_lost_after([](const std::string& node) {
        ASSERT_TRUE(shared_zk().set_data(node, "admin"));
        ASSERT_TRUE(shared_zk().remove(node));
    });
}

TEST(ZkLock, NodeChangedAndDeletedAtOnceIsLost) {
    // One transaction: the holder hears only the change and finds the node gone when it sets
    // its watch again.
    expect_lost_after(
        [](const std::string& node) { ASSERT_TRUE(shared_zk().set_and_remove(node)); });
}

TEST(ZkLock, NamesAreOneEncodedComponent) {
    auto zk = make_client();
    EXPECT_EQ(zk.lock_path("a/b"), "/dlock-it/a%2Fb");
    EXPECT_EQ(zk.lock_path(".."), "/dlock-it/%2E%2E");
    EXPECT_NE(zk.lock_path("a/b"), zk.lock_path("a%2Fb"));
    std::error_code ec;
    auto l = take(zk, "../../zookeeper", dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_FALSE(ec) << ec.message();
}

TEST(ZkLock, AMovedFromClientRefusesEveryCall) {
    auto a = make_client();
    auto b = std::move(a);
    dlock::test::expect_moved_from_refuses(
        a, /*has_permits=*/true);  // NOLINT(bugprone-use-after-move)
    EXPECT_NO_THROW(b.acquire(dlock::test::unique_name("moved-to"), {.wait = 0ms}).release());
}

TEST(ZkLock, BadInput) {
    for (const char* url : {"redis://127.0.0.1:1", "zk://", "zk://:2181", "zk://h:0",
                            "zk://h:99999", "zk://h:x/a", "zk://h//a", "zk://h/a/", "zk://h/a/../b",
                            "zk://u:p@h/a", "zk://h/a?x=1", "zk://h1,,h2/a", "zk://[::1/a"}) {
        try {
            dlock::zk::client c({.url = url});
            ADD_FAILURE() << url << " was accepted";
        } catch (const dlock::error& e) {
            EXPECT_EQ(e.code(), dlock::errc::invalid_argument) << url;
            EXPECT_NE(std::string(e.what()).find("URL"), std::string::npos) << e.what();
        }
    }
    try {
        dlock::zk::client c({.session_timeout = 0ms});
        ADD_FAILURE();
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("session_timeout"), std::string::npos);
    }
    try {
        dlock::zk::client c({.connect_timeout = -1ms});
        ADD_FAILURE();
    } catch (const dlock::error& e) {
        EXPECT_NE(std::string(e.what()).find("connect_timeout"), std::string::npos);
    }
    auto zk = make_client();
    std::error_code ec;
    auto l = take(zk, "", dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    l = zk.acquire_until("x", {.kind = dlock::lock_kind::permits, .count = 0, .limit = 2}, {},
                         steady::now(), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    l = zk.acquire_until("x", {}, {.lease = 1ms}, steady::now(), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
}

TEST(ZkLock, UnreachableEnsembleFailsWithinConnectTimeout) {
    const auto port = dlock::test::free_port();
    dlock::zk::client zk(
        {.url = "zk://127.0.0.1:" + std::to_string(port) + "/x", .connect_timeout = 500ms});
    const auto started = steady::now();
    std::error_code ec;
    auto l = zk.acquire_until("x", {}, {}, steady::now() + 10s, ec);
    const auto took = steady::now() - started;
    EXPECT_EQ(ec, dlock::errc::connection_failed);
    EXPECT_LT(took, 500ms + scaled(1500ms));
    EXPECT_THROW((void)zk.acquire("x", {.wait = 0ms}), dlock::error);
}

/// A client of the shared server under `base`, with `digest` ("user:password") unless empty.
dlock::zk::client digest_client(const std::string& base, const std::string& digest) {
    return dlock::zk::client(
        {.url = shared_zk().url(base), .connect_timeout = scaled(5s), .digest = digest});
}

TEST(ZkLock, DigestProtectsNodes) {
    const std::string base = "/dlock-acl";
    auto alice = digest_client(base, "alice:right");
    auto same = digest_client(base, "alice:right");
    auto mallory = digest_client(base, "alice:wrong");
    const auto name = dlock::test::unique_name("acl");
    std::error_code ec;
    auto l = take(alice, name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    auto m = take(mallory, name, dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_EQ(ec, dlock::errc::auth_failed);
    m = take(same, name, dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "the same identity contends normally";
    EXPECT_THROW(dlock::zk::client({.digest = "no-colon"}), dlock::error);
}

TEST(ZkLock, ANodeAheadOfAnotherIdentityIsAnAuthErrorNotAWaitUntilTheDeadline) {
    // The lock's parent made by a client without a digest (an open ACL), a holder with one
    // (CREATOR_ALL_ACL on its node), a waiter without: the waiter may create its node but not
    // read the holder's, and the server would not tell it of that node's going either. It gets
    // errc::auth_failed (docs/zookeeper.md, "Errors"), not a wait that ends at its deadline.
    const std::string base = "/dlock-acl-mixed";
    auto open = digest_client(base, "");
    auto alice = digest_client(base, "alice:right");
    const auto name = dlock::test::unique_name("acl");
    std::error_code ec;
    {
        auto first = take(open, name, dlock::lock_kind::exclusive, 0ms, ec);
        ASSERT_FALSE(ec) << ec.message();
    }
    auto held = take(alice, name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    auto waiter = take(open, name, dlock::lock_kind::exclusive, scaled(3s), ec);
    EXPECT_EQ(ec, dlock::errc::auth_failed) << ec.message();
    EXPECT_FALSE(waiter);
    held.release();
    auto after = take(open, name, dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_FALSE(ec) << "the waiter's node went with its error: " << ec.message();
}

dlock::lease permits(dlock::zk::client& zk, const std::string& name, std::uint32_t count,
                     std::uint32_t limit, std::chrono::milliseconds wait, std::error_code& ec) {
    return zk.acquire_until(
        name,
        dlock::lock_request{.kind = dlock::lock_kind::permits, .count = count, .limit = limit}, {},
        steady::now() + wait, ec);
}

// The first waiter of a full semaphore watches the children and the permits and sleeps until one
// of them changes: it does not list the children again and again until its deadline.
TEST(ZkSemaphore, TheFirstWaiterSleepsOnItsWatches) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("sem-sleeps");
    std::error_code ec;
    auto held = permits(zk, name, 1, 1, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    const auto before = shared_zk().requests_received();
    auto waiter = permits(other, name, 1, 1, 1s, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "1 of 1 permits is held";
    const auto sent = shared_zk().requests_received() - before;
    // Its create, the listings and watches of one or two waits, the clean-up, heartbeats: a few
    // dozen at most. A waiter that does not sleep sends one listing per round trip, thousands.
    EXPECT_LT(sent, 60u) << "the waiter polled: " << sent << " requests in 1 s";
}

TEST(ZkSemaphore, PermitsAreServedFirstComeFirstServed) {
    auto zk = make_client();
    auto other = make_client();
    const auto name = dlock::test::unique_name("sem");
    std::error_code ec;
    auto a = permits(zk, name, 1, 3, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    auto b = permits(other, name, 2, 3, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_GT(b.fencing_token(), a.fencing_token());
    auto c = permits(other, name, 1, 3, 200ms, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << "3 of 3 permits are held";
    // Two queued: 2 permits, then 1. The second must not pass the first (strict FIFO).
    std::atomic<bool> two_in{false}, one_in{false};
    std::jthread w2([&] {
        std::error_code wec;
        auto l = permits(other, name, 2, 3, scaled(20s), wec);
        two_in = !wec;
        eventually([&] { return one_in.load(); }, 10s);  // both hold at once, then leave
    });
    ASSERT_TRUE(
        eventually([&] { return shared_zk().children(zk.lock_path(name)).size() == 3; }, 10s));
    std::jthread w1([&] {
        std::error_code wec;
        auto l = permits(zk, name, 1, 3, scaled(20s), wec);
        one_in = !wec;
        eventually([&] { return two_in.load(); }, 10s);
    });
    ASSERT_TRUE(
        eventually([&] { return shared_zk().children(zk.lock_path(name)).size() == 4; }, 10s));
    a.release();  // 1 free: enough for the 1-permit waiter, but it is behind the 2-permit one
    EXPECT_FALSE(eventually([&] { return one_in.load() || two_in.load(); }, 300ms));
    b.release();
    EXPECT_TRUE(eventually([&] { return one_in.load() && two_in.load(); }, 10s));
    w1.join();
    w2.join();
    EXPECT_TRUE(shared_zk().children(zk.lock_path(name)).empty());
}

// A semaphore asked for with another number of permits than the node records counts as the
// recorded one, and the error handler is told both numbers, once per acquire call.
TEST(ZkSemaphore, APermitMismatchIsReportedWithBothNumbers) {
    std::mutex guard;
    std::vector<std::string> said;  // guarded by `guard`
    dlock::zk::client zk({.url = shared_zk().url("/dlock-it"),
                          .session_timeout = 4s,
                          .connect_timeout = scaled(5s),
                          .error_handler = [&](std::error_code, std::string_view what) {
                              std::lock_guard lk(guard);
                              said.emplace_back(what);
                          }});
    const auto name = dlock::test::unique_name("sem");
    std::error_code ec;
    auto two = permits(zk, name, 1, 2, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    auto five = permits(zk, name, 1, 5, 0ms, ec);
    ASSERT_FALSE(ec) << "one of the recorded two is free: " << ec.message();
    std::lock_guard lk(guard);
    ASSERT_EQ(said.size(), 1u);
    EXPECT_NE(said.front().find("has 2 permits on the server, not the 5 asked for"),
              std::string::npos)
        << said.front();
}

TEST(ZkSemaphore, SetPermitsWakesTheFirstWaiter) {
    auto zk = make_client();
    const auto name = dlock::test::unique_name("sem");
    std::error_code ec;
    auto all = permits(zk, name, 2, 2, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    std::atomic<bool> in{false};
    std::jthread waiter([&] {
        std::error_code wec;
        auto l = permits(zk, name, 1, 2, scaled(20s), wec);
        in = !wec;
    });
    ASSERT_TRUE(
        eventually([&] { return shared_zk().children(zk.lock_path(name)).size() == 2; }, 10s));
    zk.set_permits(name, 3);
    EXPECT_TRUE(eventually([&] { return in.load(); }, 10s));
    waiter.join();
    zk.set_permits(name, 1, ec);
    EXPECT_FALSE(ec);
    zk.set_permits(name, 0, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    auto bad = permits(zk, name, 3, 2, 0ms, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "count above limit";
    // One name, one kind: a lock on a semaphore's name (and the reverse) is refused.
    const auto sem_name = name + "-sem";
    auto held = permits(zk, sem_name, 1, 1, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    auto lock = take(zk, sem_name, dlock::lock_kind::exclusive, 0ms, ec);
    EXPECT_EQ(ec, dlock::errc::unexpected_reply);
    const auto lock_name = name + "-lock";
    auto l = take(zk, lock_name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec);
    auto p = permits(zk, lock_name, 1, 2, 0ms, ec);
    EXPECT_EQ(ec, dlock::errc::unexpected_reply);
}

TEST(ZkLock, AnUncontendedAcquireCreatesOneNodeAndListsOnce) {
    // The first getChildren goes out with the create, unanswered (session::create_protected): it
    // must still list the new node (a session's requests are answered in order), or the acquire
    // would take its own node for gone and create another.
    dlock::test::zk_proxy proxy(shared_zk().client_port(0));
    dlock::zk::client via_proxy({.url = "zk://" + proxy.host() + "/dlock-it",
                                 .session_timeout = 4s,
                                 .connect_timeout = scaled(5s)});
    const auto name = dlock::test::unique_name("onecreate");
    std::error_code ec;
    // The first acquire of a name also makes its container parent (a create that fails first).
    via_proxy.acquire_until(name, {}, {}, steady::now() + scaled(10s), ec).release();
    ASSERT_FALSE(ec) << ec.message();
    const int creates = proxy.requests(ZOO_CREATE2_OP);
    const int lists = proxy.requests(ZOO_GETCHILDREN_OP);
    for (int i = 0; i < 5; ++i) {
        auto l = via_proxy.acquire_until(name, {}, {}, steady::now() + scaled(10s), ec);
        ASSERT_FALSE(ec) << ec.message();
        l.release();
    }
    // One create, and one listing with it, per acquire; one more of each if the server removed
    // the empty container between two acquires (it looks every 60 s) and it was made again.
    const int created = proxy.requests(ZOO_CREATE2_OP) - creates;
    EXPECT_TRUE(created == 5 || created == 6) << created;
    EXPECT_EQ(proxy.requests(ZOO_GETCHILDREN_OP) - lists, created);
    EXPECT_TRUE(shared_zk().children(via_proxy.lock_path(name)).empty());
}

TEST(ZkLock, LostCreateReplyIsFoundByItsGuid) {
    // The connection drops after the server made our node but before its reply came
    // (session::create_protected): the acquire goes on with that node, found by its guid once
    // reconnected, and leaves no second node behind. For a waiter, and for a semaphore.
    dlock::test::zk_proxy proxy(shared_zk().client_port(0));
    auto holder = make_client();
    dlock::zk::client via_proxy({.url = "zk://" + proxy.host() + "/dlock-it",
                                 .session_timeout = 4s,
                                 .connect_timeout = scaled(5s)});
    const auto name = dlock::test::unique_name("lostcreate");
    std::error_code ec;
    auto held = take(holder, name, dlock::lock_kind::exclusive, 0ms, ec);
    ASSERT_FALSE(ec);
    proxy.drop_reply_next(ZOO_CREATE2_OP);
    std::atomic<bool> granted{false};
    std::jthread waiter([&] {
        std::error_code wec;
        auto l = take(via_proxy, name, dlock::lock_kind::exclusive, scaled(20s), wec);
        EXPECT_FALSE(wec) << wec.message();
        granted = !wec;
        EXPECT_EQ(shared_zk().children(via_proxy.lock_path(name)).size(), 1u);
    });
    ASSERT_TRUE(eventually([&] { return proxy.dropped() == 1; }, scaled(10s)));
    // The waiter's node landed: exactly one beside the holder's, also after the reconnection.
    ASSERT_TRUE(eventually([&] { return shared_zk().children(holder.lock_path(name)).size() == 2; },
                           scaled(10s)));
    held.release();
    waiter.join();
    EXPECT_TRUE(granted.load());
    EXPECT_TRUE(shared_zk().children(holder.lock_path(name)).empty());

    const auto sem = dlock::test::unique_name("lostcreate-sem");
    proxy.drop_reply_next(ZOO_CREATE2_OP);
    auto l =
        via_proxy.acquire_until(sem, {.kind = dlock::lock_kind::permits, .count = 1, .limit = 1},
                                {}, steady::now() + scaled(10s), ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(proxy.dropped(), 2);
    EXPECT_EQ(shared_zk().children(via_proxy.lock_path(sem)).size(), 1u);
    l.release();
    EXPECT_TRUE(shared_zk().children(via_proxy.lock_path(sem)).empty());
}

// A holder whose wake-up of the waiter behind it is lost to a dropped connection must still
// wake it: the waiter may hold too (permits are free), and must not sleep until the holder
// releases.
TEST(ZkSemaphore, LostWakeUpIsRetried) {
    dlock::test::zk_proxy proxy(shared_zk().client_port(0));
    auto all = make_client();
    dlock::zk::client via_proxy({.url = "zk://" + proxy.host() + "/dlock-it",
                                 .session_timeout = 4s,
                                 .connect_timeout = scaled(5s)});
    auto behind = make_client();
    const auto name = dlock::test::unique_name("sem");
    std::error_code ec;
    auto both = permits(all, name, 2, 2, 0ms, ec);
    ASSERT_FALSE(ec) << ec.message();
    std::atomic<bool> first_in{false}, second_in{false}, done{false};
    std::jthread first([&] {  // first in line: granted when `both` goes
        std::error_code wec;
        auto l = permits(via_proxy, name, 1, 2, scaled(20s), wec);
        first_in = !wec;
        eventually([&] { return done.load(); }, 30s);
    });
    ASSERT_TRUE(
        eventually([&] { return shared_zk().children(all.lock_path(name)).size() == 2; }, 10s));
    std::jthread second([&] {  // behind `first`: watches its node
        std::error_code wec;
        auto l = permits(behind, name, 1, 2, scaled(20s), wec);
        second_in = !wec;
    });
    ASSERT_TRUE(
        eventually([&] { return shared_zk().children(all.lock_path(name)).size() == 3; }, 10s));
    proxy.drop_next(ZOO_SETDATA_OP);  // the set that would wake `second`
    both.release();
    ASSERT_TRUE(eventually([&] { return first_in.load(); }, 10s));
    EXPECT_TRUE(eventually([&] { return second_in.load(); }, 10s))
        << "2 permits, 1 held: the waiter behind the new holder slept";
    EXPECT_EQ(proxy.dropped(), 1) << "the wake-up was not cut as intended";
    done = true;
    first.join();
    second.join();
    EXPECT_TRUE(eventually([&] { return shared_zk().children(all.lock_path(name)).empty(); }, 10s));
}

TEST(ZkAdapters, RecursiveMutexNestsInOneThreadAndExcludesOthers) {
    auto zk = make_client();
    const auto name = dlock::test::unique_name("recursive");
    dlock::recursive_mutex rm(zk, name);
    std::atomic<bool> other_in{false};
    {
        std::unique_lock outer(rm);
        const auto token = rm.fencing_token();
        {
            std::scoped_lock inner(rm);  // the same thread takes it again
            EXPECT_EQ(rm.fencing_token(), token);
        }
        std::jthread other([&] {
            std::unique_lock lock(rm);  // another thread is another owner: waits
            other_in = true;
        });
        EXPECT_FALSE(eventually([&] { return other_in.load(); }, 200ms));
        EXPECT_EQ(shared_zk().children(zk.lock_path(name)).size(), 2u)
            << "our one node and the waiter's";
        outer.unlock();
        EXPECT_TRUE(eventually([&] { return other_in.load(); }, 10s));
    }
    EXPECT_TRUE(eventually([&] { return shared_zk().children(zk.lock_path(name)).empty(); }, 5s));
}

/// The acquire prologue is the backends' shared one (src/core/engine_skeleton.hpp): a semaphore
/// count out of range is refused before any I/O with the same message as on Redis.
TEST(ZkLock, SemaphoreCountOutOfRangeHasTheSharedMessage) {
    auto zk = make_client();
    const dlock::lock_request request{.kind = dlock::lock_kind::permits, .count = 3, .limit = 2};
    const auto name = dlock::test::unique_name("count");
    try {
        auto grant = zk.acquire(name, request, {.wait = 0s});
        ADD_FAILURE() << "granted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::invalid_argument) << e.what();
        const auto expected =
            "semaphore \"" + name + "\": lock_request.count (3) must be >= 1 and <= limit (2)";
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
}

}  // namespace
