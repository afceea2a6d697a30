// lease::lost_reason() on a real redis-server and a real ZooKeeper: each reason a test can provoke
// (released, expired, max_hold, taken over, deleted, client closed), the lost event's reason, and
// dlock::last_error_message() behind the noexcept twins (docs/lock-family.md, "Why a grant
// ended"). ZooKeeper's session_expired needs the server to expire a session the client still
// trusts, which its own bound prevents (the lease is lost as expired first): not provoked here.
#include <dlock/config.hpp>
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif

namespace dlock {
// gtest prints the reason's name, not its byte.
void PrintTo(lost_reason r, std::ostream* os) { *os << to_string(r); }
}  // namespace dlock

namespace {

using namespace std::chrono_literals;
using dlock::lost_reason;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
#if DLOCK_HAS_ZOOKEEPER
using dlock::test::shared_zk;
#endif
using dlock::test::unique_name;
using steady = std::chrono::steady_clock;

/// The reasons of the lost events seen, in order.
struct loss_log {
    std::mutex mutex;
    std::vector<lost_reason> reasons;
    std::vector<lost_reason> released;  // reasons of released events
    dlock::observer observer() {
        return [this](const dlock::lock_event& e) {
            std::lock_guard lock(mutex);
            if (e.kind == dlock::event_kind::lost) reasons.push_back(e.reason);
            if (e.kind == dlock::event_kind::released) released.push_back(e.reason);
        };
    }
    /// The reasons of the lost events, once there is one (or after 10 s): the event is emitted
    /// after lost_token() fires, from the thread that found the loss, so a test that saw the token
    /// may ask before it came.
    std::vector<lost_reason> lost() {
        const auto until = std::chrono::steady_clock::now() + dlock::test::scaled(10s);
        for (;;) {
            {
                std::lock_guard lock(mutex);
                if (!reasons.empty() || std::chrono::steady_clock::now() >= until) return reasons;
            }
            std::this_thread::sleep_for(1ms);
        }
    }
};

TEST(LostReasonRedis, HeldIsNoneReleasedIsReleased) {
    loss_log log;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = log.observer()});
    auto l = redis.acquire(unique_name("x"), {.lease = 10s});
    EXPECT_EQ(l.lost_reason(), lost_reason::none);
    l.release();
    EXPECT_EQ(l.lost_reason(), lost_reason::released);  // empty now
    EXPECT_EQ(dlock::lease().lost_reason(), lost_reason::released);
    std::lock_guard lock(log.mutex);
    EXPECT_TRUE(log.reasons.empty());
    EXPECT_EQ(log.released, std::vector<lost_reason>{lost_reason::released});
}

TEST(LostReasonRedis, KeyDeletedBySomeoneElse) {
    loss_log log;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = log.observer()});
    const auto name = unique_name("x");
    auto l = redis.acquire(name, {.lease = scaled(3s), .renew_every = scaled(200ms)});
    redis.command({"DEL", redis.lock_key(name)});
    ASSERT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(l.lost_reason(), lost_reason::deleted);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::deleted});
}

TEST(LostReasonRedis, KeyTakenOver) {
    loss_log log;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = log.observer()});
    const auto name = unique_name("x");
    auto l = redis.acquire(name, {.lease = scaled(3s), .renew_every = scaled(200ms)});
    redis.command({"SET", redis.lock_key(name), "another-owner", "PX", "10000"});
    ASSERT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(l.lost_reason(), lost_reason::taken_over);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::taken_over});
}

TEST(LostReasonRedis, ReleaseFindsItTakenOverBeforeTheWatchdog) {
    // The takeover happens between renewals; release() is the first to notice: lock_lost, and the
    // grant ends with one lost event naming the reason.
    loss_log log;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = log.observer()});
    const auto name = unique_name("x");
    auto l = redis.acquire(name, {.lease = 30s});
    redis.command({"SET", redis.lock_key(name), "another-owner", "PX", "10000"});
    std::error_code ec;
    l.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    EXPECT_NE(dlock::last_error_message(ec).find("no longer held"), std::string::npos)
        << dlock::last_error_message(ec);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::taken_over});
    std::lock_guard lock(log.mutex);
    EXPECT_TRUE(log.released.empty());
}

TEST(LostReasonRedis, ReleaseFindsItDeleted) {
    loss_log log;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = log.observer()});
    const auto name = unique_name("x");
    auto l = redis.acquire(name, {.lease = 30s});
    redis.command({"DEL", redis.lock_key(name)});
    std::error_code ec;
    l.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::deleted});
}

TEST(LostReasonRedis, FixedLeaseExpires) {
    dlock::redis::client redis({.url = shared_redis().url()});
    auto l = redis.acquire(unique_name("x"), {.lease = 200ms, .renew = false});
    ASSERT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(l.lost_reason(), lost_reason::expired);
}

TEST(LostReasonRedis, MaxHoldReached) {
    loss_log log;
    dlock::redis::client redis({.url = shared_redis().url(), .observer = log.observer()});
    auto l =
        redis.acquire(unique_name("x"), {.lease = 300ms, .renew_every = 100ms, .max_hold = 500ms});
    ASSERT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(l.lost_reason(), lost_reason::max_hold);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::max_hold});
}

TEST(LostReasonRedis, ClientClosed) {
    loss_log log;
    dlock::lease l;
    {
        dlock::redis::client redis({.url = shared_redis().url(), .observer = log.observer()});
        l = redis.acquire(unique_name("x"), {.lease = 10s});
    }
    EXPECT_TRUE(l.lost_token().stop_requested());
    EXPECT_EQ(l.lost_reason(), lost_reason::client_closed);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::client_closed});
}

TEST(LostReasonRedis, RenewalFailedThenExpiredWithTheObserverCallingBackIn) {
    // The server pauses: renewals go unanswered (renewal_failed, once), then the lease runs out
    // (expired). The observer releases another lease of the same client from the renewal_failed
    // event: it must be called with no lock of the client held, or that release would deadlock.
    dlock::test::redis_server server;
    std::mutex mutex;  // guards seen
    std::vector<dlock::event_kind> seen;
    std::mutex other_mutex;  // guards other (the observer's release emits events itself)
    dlock::lease other;
    std::atomic<bool> released_other{false};
    dlock::redis::client redis({.url = server.url(),
                                .command_timeout = 200ms,
                                .observer = [&](const dlock::lock_event& e) {
                                    {
                                        std::lock_guard lock(mutex);
                                        seen.push_back(e.kind);
                                    }
                                    if (e.kind == dlock::event_kind::renewal_failed &&
                                        !released_other.exchange(true)) {
                                        std::lock_guard lock(other_mutex);
                                        std::error_code ignored;
                                        other.release(ignored);  // takes the client's registry lock
                                    }
                                }});
    auto taken = redis.acquire(unique_name("other"), {.lease = 10s});
    {
        std::lock_guard lock(other_mutex);
        other = std::move(taken);
    }
    auto l = redis.acquire(unique_name("x"), {.lease = scaled(3s), .renew_every = 300ms});
    server.pause();
    ASSERT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 10s));
    server.resume();
    EXPECT_EQ(l.lost_reason(), lost_reason::expired);
    EXPECT_TRUE(released_other.load());
    std::lock_guard lock(mutex);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), dlock::event_kind::renewal_failed), 1)
        << "once per episode; seen: " << [&] {
               std::string out;
               for (const auto k : seen) out += std::string(dlock::to_string(k)) + " ";
               return out;
           }();
}

TEST(LastErrorMessage, NoexceptTwinsKeepTheDetailPerThread) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name("held");
    auto held = redis.acquire(name, {.lease = 10s});
    std::error_code ec;
    auto no = redis.acquire(name, {.lease = 0ms}, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    const auto detail = dlock::last_error_message(ec);
    EXPECT_NE(detail.find("lease"), std::string::npos) << detail;
    EXPECT_NE(detail, ec.message());
    EXPECT_EQ(dlock::last_error_message(), detail);
    // Another thread has its own slot.
    std::string other;
    std::thread([&] { other = dlock::last_error_message(); }).join();
    EXPECT_EQ(other, "");
    // A code other than the stored one gets its plain message.
    EXPECT_EQ(dlock::last_error_message(dlock::make_error_code(dlock::errc::canceled)),
              dlock::make_error_code(dlock::errc::canceled).message());
    EXPECT_EQ(dlock::last_error_message(std::error_code{}), "");
    no = redis.acquire(name, {.lease = 10s, .wait = 0ms}, ec);
    EXPECT_EQ(ec, dlock::errc::timeout);
    EXPECT_NE(dlock::last_error_message(ec).find(name), std::string::npos);
}

#if DLOCK_HAS_ZOOKEEPER
dlock::zk::client zk_client(dlock::observer observer = {}) {
    return dlock::zk::client({.url = shared_zk().url("/dlock-lost"),
                              .session_timeout = 4s,
                              .connect_timeout = scaled(5s),
                              .observer = std::move(observer)});
}

TEST(LostReasonZk, NodeDeletedBySomeoneElse) {
    loss_log log;
    auto zk = zk_client(log.observer());
    const auto name = unique_name("x");
    auto l = zk.acquire(name, {.lease = 10s});
    EXPECT_EQ(l.lost_reason(), lost_reason::none);
    const auto kids = shared_zk().children(zk.lock_path(name));
    ASSERT_EQ(kids.size(), 1u);
    ASSERT_TRUE(shared_zk().remove(zk.lock_path(name) + "/" + kids.front()));
    ASSERT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(l.lost_reason(), lost_reason::deleted);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::deleted});
    std::error_code ec;
    l.release(ec);
    EXPECT_EQ(ec, dlock::errc::lock_lost);
    EXPECT_EQ(log.lost().size(), 1u) << "one end per grant";
}

// A waiter watches its own node from its first wait on (session::prewatch), so the watch that
// makes a holder's lease lost when someone else deletes its node is set before the grant. A
// deletion while it waits uses that watch up: the grant must set it again, find the node gone
// and report the lease lost (docs/zookeeper.md, "The recipe", step 4).
TEST(LostReasonZk, NodeDeletedWhileWaitingIsLostOnceGranted) {
    loss_log log;
    auto holder_client = zk_client();
    auto waiter_client = zk_client(log.observer());
    const auto name = unique_name("waiting");
    const auto parent = holder_client.lock_path(name);
    auto holder = holder_client.acquire(name, {.lease = 10s});
    const auto holder_node = parent + "/" + shared_zk().children(parent).at(0);
    std::error_code ec;
    dlock::lease waiter;
    std::jthread waiting([&] { waiter = waiter_client.acquire(name, {.lease = 10s}, ec); });
    std::string waiter_node;
    ASSERT_TRUE(eventually(
        [&] {
            for (const auto& k : shared_zk().children(parent)) {
                const auto path = parent + "/" + k;
                // The waiter's node, once the waiter watches it (its own prewatch).
                if (path != holder_node && shared_zk().watchers(path) == 1) {
                    waiter_node = path;
                    return true;
                }
            }
            return false;
        },
        10s));
    ASSERT_TRUE(shared_zk().remove(waiter_node));
    holder.release();
    waiting.join();
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_TRUE(eventually([&] { return waiter.lost_token().stop_requested(); }, 10s))
        << "granted on a node someone else deleted, and never told";
    EXPECT_EQ(waiter.lost_reason(), lost_reason::deleted);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::deleted});
}

TEST(LostReasonZk, MaxHoldAndFixedLease) {
    auto zk = zk_client();
    auto l = zk.acquire(unique_name("cap"), {.max_hold = 300ms});
    ASSERT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(l.lost_reason(), lost_reason::max_hold);
    auto f = zk.acquire(unique_name("fixed"), {.lease = 300ms, .renew = false});
    ASSERT_TRUE(eventually([&] { return f.lost_token().stop_requested(); }, 10s));
    EXPECT_EQ(f.lost_reason(), lost_reason::expired);
}

TEST(LostReasonZk, ReleasedAndClientClosed) {
    loss_log log;
    dlock::lease kept;
    {
        auto zk = zk_client(log.observer());
        auto l = zk.acquire(unique_name("x"), {.lease = 10s});
        l.release();
        kept = zk.acquire(unique_name("y"), {.lease = 10s});
    }
    EXPECT_EQ(kept.lost_reason(), lost_reason::client_closed);
    EXPECT_EQ(log.lost(), std::vector<lost_reason>{lost_reason::client_closed});
    std::lock_guard lock(log.mutex);
    EXPECT_EQ(log.released, std::vector<lost_reason>{lost_reason::released});
}

#endif  // DLOCK_HAS_ZOOKEEPER

}  // namespace
