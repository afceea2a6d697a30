// The pure rules of the Redis acquire path (src/redis/acquire_rules.hpp): hand-off message
// parsing, the ticket rule and a hand-off grant's validity, and the re-check time of a contended
// waiter. Stepped with an explicit `now` and a fixed jitter; no clock, no server.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "redis/acquire_rules.hpp"
#include "redis/protocol.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::redis::detail::contention;
using dlock::redis::detail::handoff_client;
using dlock::redis::detail::handoff_lease;
using dlock::redis::detail::handoff_ticket;
using dlock::redis::detail::parse_handoff;
using dlock::redis::detail::retry_at;
using dlock::redis::detail::waiter_liveness;
using steady = dlock::detail::steady;

const steady::time_point t0 = steady::time_point{} + 1000h;
const dlock::detail::drift_model drift{};

long long no_jitter(long long /*bound_ns*/) noexcept { return 0; }
long long full_jitter(long long bound_ns) noexcept { return bound_ns; }

TEST(RedisHandoffMessage, ParsesFenceTicketAndToken) {
    const auto m = parse_handoff("granted 42 7 fair:client-1.abc");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->fence, 42u);
    EXPECT_EQ(m->ticket, 7u);
    EXPECT_EQ(m->token, "fair:client-1.abc");
}

TEST(RedisHandoffMessage, RejectsEveryOtherShape) {
    for (const char* text :
         {"", "granted", "granted ", "granted 42", "granted 42 7", "granted 42 7 ", "released",
          "granted x 7 t", "granted 42 y t", "granted -1 7 t", "granted 42 7x t", "granted  7 t",
          "Granted 42 7 t", "granted 99999999999999999999 7 t"}) {
        SCOPED_TRACE(text);
        EXPECT_FALSE(parse_handoff(text));
    }
}

TEST(RedisHandoffMessage, TheClientPartNamesTheHandoffChannel) {
    EXPECT_EQ(handoff_client("fair:c1.0123abcd"), "fair:c1");
    EXPECT_EQ(handoff_client("write:host.name:c1.0123"), "write:host.name:c1");
    EXPECT_EQ(handoff_client("no-dot"), "no-dot");
}

TEST(RedisHandoffTicket, NoGrantBeforeANotYetWithATicket) {
    handoff_ticket ticket;
    EXPECT_EQ(ticket.floor(), 0u);
    EXPECT_FALSE(ticket.accept("granted 5 0 me", "me", t0, drift));
    ticket.not_yet(0, t0, 10s);  // a "not yet" without a ticket matches no message
    EXPECT_FALSE(ticket.accept("granted 5 0 me", "me", t0, drift));
}

TEST(RedisHandoffTicket, AGrantOfTheCurrentEntryCountsFromTheRefresh) {
    handoff_ticket ticket;
    ticket.not_yet(3, t0, 10s);
    const auto g = ticket.accept("granted 17 3 me", "me", t0 + 5ms, drift);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->fence, 17u);
    EXPECT_EQ(g->sent, t0);
    // Bounded by the hand-off lease (shorter than the lease asked for), minus the drift.
    EXPECT_EQ(g->valid_until, dlock::detail::valid_until(t0, handoff_lease, drift));
}

TEST(RedisHandoffTicket, TheRefreshLeaseBoundsTheGrantWhenShorter) {
    handoff_ticket ticket;
    ticket.not_yet(3, t0, 500ms);  // e.g. cut by max_hold
    const auto g = ticket.accept("granted 17 3 me", "me", t0, drift);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->valid_until, dlock::detail::valid_until(t0, 500ms, drift));
}

TEST(RedisHandoffTicket, AnotherWaitersOrAnOlderEntrysGrantIsNotOurs) {
    handoff_ticket ticket;
    ticket.not_yet(3, t0, 10s);
    EXPECT_FALSE(ticket.accept("granted 17 3 someone-else", "me", t0, drift));
    ticket.not_yet(9, t0 + 1s, 10s);  // re-queued: a new entry with a higher ticket
    EXPECT_FALSE(ticket.accept("granted 17 3 me", "me", t0 + 1s, drift));
    EXPECT_TRUE(ticket.accept("granted 18 9 me", "me", t0 + 1s, drift));
}

TEST(RedisHandoffTicket, AGrantWhoseValidityPassedIsDiscarded) {
    handoff_ticket ticket;
    ticket.not_yet(3, t0, 10s);
    const auto valid = dlock::detail::valid_until(t0, handoff_lease, drift);
    EXPECT_TRUE(ticket.accept("granted 17 3 me", "me", valid - 1ns, drift));
    EXPECT_FALSE(ticket.accept("granted 17 3 me", "me", valid, drift));  // paused past it
}

TEST(RedisHandoffTicket, TheFloorIsTheHighestTicketSeen) {
    handoff_ticket ticket;
    ticket.not_yet(7, t0, 10s);
    ticket.not_yet(4, t0, 10s);  // a lower one (an older entry's reply) does not lower it
    EXPECT_EQ(ticket.floor(), 7u);
    EXPECT_EQ(ticket.current(), 4u);
}

TEST(RedisRetryAt, TheHoldersRemainingLeaseBoundsTheSleep) {
    EXPECT_EQ(retry_at(t0, {250, 0}, 10s, false, 50ms, &no_jitter), t0 + 250ms);
    // Unknown expiry: our own lease.
    EXPECT_EQ(retry_at(t0, {-1, 0}, 10s, false, 50ms, &no_jitter), t0 + 10s);
    // Up to 2 ms of jitter on top.
    EXPECT_EQ(retry_at(t0, {250, 0}, 10s, false, 50ms, &full_jitter), t0 + 252ms);
}

TEST(RedisRetryAt, AWaiterWithAnEntryRefreshesItsLiveness) {
    EXPECT_EQ(retry_at(t0, {60'000, 0}, 10s, true, 50ms, &no_jitter), t0 + waiter_liveness / 3);
    EXPECT_EQ(retry_at(t0, {-1, 0}, 10s, true, 50ms, &no_jitter), t0 + waiter_liveness / 3);
    // A shorter holder lease (or mutex turn) still comes first.
    EXPECT_EQ(retry_at(t0, {40, 0}, 10s, true, 50ms, &no_jitter), t0 + 40ms);
}

TEST(RedisRetryAt, ASplitVoteRetriesWithinTwiceTheNodeTimeout) {
    EXPECT_EQ(retry_at(t0, {5'000, 1}, 10s, false, 50ms, &full_jitter), t0 + 100ms);
    EXPECT_EQ(retry_at(t0, {5'000, 2}, 10s, false, 50ms, &no_jitter), t0);
    // Never later than the holder's lease would have it.
    EXPECT_EQ(retry_at(t0, {30, 1}, 10s, false, 50ms, &full_jitter), t0 + 32ms);
}

}  // namespace
