// The Redis waiter strategies (src/redis/waiter.hpp): which one each kind gets, the tokens and
// waiter ids its attempts send, where it waits, when it re-checks and what a message grants.
// Stepped with an explicit `now` and a fixed jitter; no clock, no server.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "redis/protocol.hpp"
#include "redis/waiter.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::lock_kind;
using dlock::redis::detail::broadcast_waiter;
using dlock::redis::detail::contended_attempt;
using dlock::redis::detail::make_waiter;
using dlock::redis::detail::mutex_waiter;
using dlock::redis::detail::queued_waiter;
using dlock::redis::detail::waiter_context;
using dlock::redis::detail::waiter_liveness;
using dlock::redis::detail::waiter_strategy;
using steady = dlock::detail::steady;

const steady::time_point t0 = steady::time_point{} + 1000h;

long long no_jitter(long long /*bound_ns*/) noexcept { return 0; }

waiter_context context(lock_kind kind) {
    return {kind, "c1", "p:{orders}:released", 50ms, {}, &no_jitter};
}

std::unique_ptr<waiter_strategy> waiter(lock_kind kind) {
    return make_waiter(context(kind), kind == lock_kind::fair || kind == lock_kind::write);
}

/// A contended attempt sent at t0 for a 10 s lease; the holder has `holder_ms` left.
contended_attempt held(std::int64_t holder_ms, std::uint64_t ticket = 0) {
    return {{holder_ms, 0}, 1, ticket, t0, 10s};
}

TEST(RedisWaiter, EachKindGetsItsStrategy) {
    // One server and Redlock alike: Redlock registers on every server.
    EXPECT_TRUE(dynamic_cast<mutex_waiter*>(waiter(lock_kind::exclusive).get()));
    for (const auto kind : {lock_kind::reentrant, lock_kind::read, lock_kind::permits})
        EXPECT_TRUE(dynamic_cast<broadcast_waiter*>(waiter(kind).get()));
    for (const auto kind : {lock_kind::fair, lock_kind::write})
        EXPECT_TRUE(dynamic_cast<queued_waiter*>(waiter(kind).get()));
}

TEST(RedisWaiter, BroadcastSendsAFreshTokenAndWakesOneWhereOneGetsIn) {
    for (const auto kind : {lock_kind::reentrant, lock_kind::read, lock_kind::permits}) {
        SCOPED_TRACE(dlock::to_string(kind));
        auto w = waiter(kind);
        const auto first = w->next_token();
        EXPECT_EQ(first.size(), 32u);  // a bare random token: the server knows the kind
        EXPECT_NE(w->next_token(), first);
        EXPECT_EQ(w->leaves_as(), nullptr);
        EXPECT_TRUE(w->waiter_id().empty());
        EXPECT_EQ(w->ticket_floor(), 0u);
        EXPECT_FALSE(w->lingering());
        const auto target = w->subscribe();
        EXPECT_EQ(target.channel, "p:{orders}:released");
        EXPECT_EQ(target.wake_one, kind == lock_kind::reentrant);
        EXPECT_TRUE(target.key.empty());
        EXPECT_EQ(w->contended(held(30'000), t0), t0 + 30s);  // no entry to keep alive
        EXPECT_FALSE(w->granted_by_message());
        EXPECT_FALSE(w->woke({"granted 1 1 " + first}, t0));
    }
}

TEST(RedisWaiter, TheMutexWaiterRegistersOnceItWaitsAndIsGrantedByTheRelease) {
    auto w = waiter(lock_kind::exclusive);
    const auto first = w->next_token();  // a copy: next_token() returns the waiter's own
    EXPECT_NE(w->next_token(), first);
    // Before its first wait: nothing registered, nothing to leave, the holder's lease bounds.
    EXPECT_TRUE(w->waiter_id().empty());
    EXPECT_EQ(w->leaves_as(), nullptr);
    EXPECT_EQ(w->contended(held(30'000), t0), t0 + 30s);
    EXPECT_FALSE(w->woke({"granted 9 1 " + first}, t0)) << "unregistered: no grant is its";
    const auto target = w->subscribe();
    EXPECT_EQ(target.channel, "p:{orders}:released:mutex:c1");
    EXPECT_FALSE(target.wake_one);
    EXPECT_TRUE(target.key.starts_with("mutex:c1."));
    EXPECT_EQ(w->waiter_id(), target.key);
    EXPECT_EQ(w->next_token(), target.key) << "registered: a key handed to it holds its id";
    ASSERT_NE(w->leaves_as(), nullptr);
    EXPECT_EQ(*w->leaves_as(), target.key);
    // Registered: it refreshes its entry's liveness; a holder's shorter remaining lease first.
    contended_attempt attempt{{30'000, 0}, 1, 0, t0, 10s, {5}, false};
    EXPECT_EQ(w->contended(attempt, t0), t0 + waiter_liveness / 3);
    EXPECT_EQ(w->contended(held(80), t0), t0 + 80ms);
    EXPECT_EQ(w->contended(attempt, t0), t0 + waiter_liveness / 3);
    EXPECT_EQ(w->ticket_floor(), 5u);
    // One server: the release's grant for the entry its latest attempt was told is the hold.
    EXPECT_TRUE(w->granted_by_message());
    const auto grant = [&](int fence, int ticket) {
        return "granted " + std::to_string(fence) + " " + std::to_string(ticket) + " " + target.key;
    };
    const auto g = w->woke({grant(9, 5)}, t0 + 1ms);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->fence, 9u);
    EXPECT_EQ(g->sent, t0);
    EXPECT_LE(g->valid_until, t0 + dlock::redis::detail::handoff_lease);
    EXPECT_EQ(w->awaits_more({grant(9, 5)}, t0 + 1ms), std::chrono::nanoseconds::zero());
    EXPECT_FALSE(w->woke({grant(9, 4)}, t0 + 1ms)) << "an older entry's grant";
    EXPECT_FALSE(w->woke({"granted 9 5 mutex:c1.other"}, t0 + 1ms)) << "another waiter's";
    EXPECT_FALSE(w->woke({"wake " + target.key}, t0 + 1ms)) << "a wake-up of earlier versions";
    EXPECT_FALSE(w->woke({grant(9, 5)}, t0 + dlock::redis::detail::handoff_lease))
        << "past the hand-off lease";
}

// Redlock (docs/redlock.md, "Waiting"): each node hands its key to its own head and tells it
// "granted <fence> <ticket> <id>"; the head holds once a quorum of nodes did so for the entries
// its latest attempt was told "held" with there, at one fence, within the hand-off lease.
TEST(RedisWaiter, ARedlockHeadHoldsOnAQuorumOfGrantsAtOneFence) {
    auto ctx = context(lock_kind::exclusive);
    ctx.nodes = 3;
    auto w = make_waiter(ctx, false);
    const auto id = w->subscribe().key;
    EXPECT_EQ(w->next_token(), id) << "registered: its id is its token on every node";
    EXPECT_TRUE(w->granted_by_message());
    const auto grant = [&](int fence, int ticket) {
        return "granted " + std::to_string(fence) + " " + std::to_string(ticket) + " " + id;
    };
    contended_attempt attempt{{30'000, 0}, 3, 0, t0, 10s, {4, 7, 2}, false};
    w->contended(attempt, t0);
    EXPECT_EQ(w->ticket_floor(), 7u) << "the highest ticket of any node";
    EXPECT_FALSE(w->woke({grant(9, 4), "", ""}, t0 + 1ms)) << "one node of three";
    const auto g = w->woke({grant(9, 4), grant(9, 7), ""}, t0 + 1ms);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->fence, 9u);
    EXPECT_EQ(g->sent, t0);
    EXPECT_LE(g->valid_until, t0 + dlock::redis::detail::handoff_lease)
        << "the key handed over carries the hand-off lease";
    EXPECT_FALSE(w->woke({grant(9, 4), grant(10, 7), ""}, t0 + 1ms))
        << "the fences disagree: an attempt writes back";
    EXPECT_FALSE(w->woke({grant(9, 3), grant(9, 7), ""}, t0 + 1ms)) << "node 0: an older entry";
    EXPECT_FALSE(w->woke({grant(9, 4), "granted 9 7 mutex:c1.other", ""}, t0 + 1ms))
        << "node 1 handed to another waiter";
    EXPECT_FALSE(w->woke({grant(9, 4), grant(9, 7), ""}, t0 + dlock::redis::detail::handoff_lease))
        << "past the hand-off lease";
    EXPECT_FALSE(w->woke({"wake " + id, "wake " + id, "wake " + id}, t0 + 1ms));
    // The undo of a split takes the entries off every node: their grants count no more.
    attempt.undone = true;
    w->contended(attempt, t0 + 2ms);
    EXPECT_FALSE(w->woke({grant(9, 4), grant(9, 7), grant(9, 2)}, t0 + 3ms));
    EXPECT_EQ(w->ticket_floor(), 7u) << "the next entries get higher tickets";
}

TEST(RedisWaiter, AQueuedWaiterKeepsItsPlaceAndIsHandedTheLock) {
    auto w = waiter(lock_kind::fair);
    const auto token = w->next_token();
    EXPECT_TRUE(token.starts_with("fair:c1."));
    EXPECT_EQ(w->next_token(), token);
    ASSERT_NE(w->leaves_as(), nullptr);
    EXPECT_EQ(*w->leaves_as(), token);
    const auto lingering = w->lingering();
    ASSERT_TRUE(lingering);
    EXPECT_EQ(lingering->channel, "p:{orders}:released:fair:c1");
    EXPECT_EQ(lingering->key, token);
    EXPECT_EQ(w->subscribe().channel, lingering->channel);
    EXPECT_TRUE(w->granted_by_message());

    EXPECT_EQ(w->contended(held(30'000, 4), t0), t0 + waiter_liveness / 3);
    EXPECT_EQ(w->ticket_floor(), 4u);
    EXPECT_FALSE(w->woke({"granted 9 3 " + token}, t0));  // an older entry's
    const auto g = w->woke({"granted 9 4 " + token}, t0 + 1ms);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->fence, 9u);
    EXPECT_EQ(g->sent, t0);
}

TEST(RedisWaiter, AQueuedWaiterRecordsNoTicketWhenNobodyHolds) {
    auto w = waiter(lock_kind::write);
    const auto token = w->next_token();
    EXPECT_TRUE(token.starts_with("write:c1."));
    contended_attempt split{{5'000, 1}, 0, 4, t0, 10s};  // no server answered "held"
    w->contended(split, t0);
    EXPECT_EQ(w->ticket_floor(), 0u);
    EXPECT_FALSE(w->woke({"granted 9 4 " + token}, t0));
}

}  // namespace
