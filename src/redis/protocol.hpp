// The server side of each lock kind on Redis: which Lua scripts it runs and the keys they touch.
// The engine (engine.cpp) drives every kind through the same calling convention, so a kind is a
// set of scripts (src/redis/lua/<kind>_*.lua) plus one row of the table in protocol.cpp.
//
// Calling convention (every script of a kind gets the same KEYS):
//   KEYS     <prefix>:{name} followed by the kind's key suffixes (all in one hash slot).
//   acquire  ARGV token, lease_ms, count, limit, liveness_ms, release_channel, reenter ("1"/"0"),
//            ticket_floor, waiter (below), idle_ms (client_options::idle_expiry), clock_floor
//            ("1": one server; "0": Redlock's counters, no clock floor)
//            -> {1, fencing token} granted, or {0, ms}: not granted, re-check within ms at the
//            latest (-1: unknown). Queued kinds (re)register the waiter with a liveness deadline
//            of now + liveness_ms and are idempotent, so the same call refreshes it; they answer
//            {0, ms, ticket}, the ticket of the waiter's queue entry. A new entry's ticket is
//            above ticket_floor (the highest ticket the waiter was told), so it never repeats.
//            The semaphore adds two elements, 0 and its recorded limit, when that is not `limit`.
//   release  ARGV token, release_channel, grant_lease_ms, whole ("1": the reentrant owner's last
//            level after a re-entry of unknown outcome: every level goes; other kinds ignore it),
//            idle_ms, registered (the exclusive kind on Redlock: the waiter id the holder
//            registered under; ''), clock_floor (as acquire's)
//            -> 1 ours and released, 0 not ours.
//            A hand-off (queued kinds, and the exclusive kind's registered waiters) makes the
//            next live waiter the owner with a lease of grant_lease_ms, removes its entry and
//            PUBLISHes "granted <fencing token> <ticket> <waiter token>" on
//            <release_channel>:<waiter token up to its '.'>, the waiting client's hand-off
//            channel for the name; other releases PUBLISH on release_channel. A waiter accepts a
//            grant only for the ticket of its latest "not yet" reply, with validity from that
//            refresh's send time (docs/lock-family.md).
//   renew    ARGV token, lease_ms, idle_ms -> 1 extended, 0 not ours.
//   acquire of the exclusive kind takes ARGV[9] too: a waiter id that joins (or refreshes) its
//            place among the mutex waiters when the lock is held ('' : none), taken off by a
//            grant, and answered {0, ms, ticket}. Its KEYS are <key>, :fence, :mutex_waiters,
//            :mutex_alive, :mutex_arrivals. A free key with a live waiter is handed to the live
//            head (as by a release) and the caller waits behind it; a key that holds the
//            caller's waiter id (handed to it) is taken up by an attempt with that id as token.
//   leave    (exclusive kind) ARGV as release, the waiter id as token: the registered waiter
//            gives up; a key handed to it goes on to the next live head, as by a release.
//   leave    (queued kinds) ARGV as release: the waiter gives up, or its wait failed after a
//            request may have reached the server; removes it from the queue and, if it was
//            granted meanwhile, releases with hand-off. Returns 1 when it was granted.
//   Queued kinds' queue keys expire 2 x liveness_ms after the last refresh; the fence counter
//   of every kind max(idle_ms, lease) after its last grant, and a new token is
//   max(counter + 1, the server's clock in us), so tokens rise across that expiry
//   (lua/lib/fence.lua, docs/redis-lock.md "Fencing tokens and key expiry").
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/backend.hpp>

#include "redis/scripts.hpp"

namespace dlock::redis::detail {

/// A queued waiter's liveness: it refreshes its queue entry every third of this; an entry not
/// refreshed for this long belongs to a dead waiter, and scripts skip and purge it.
inline constexpr std::chrono::milliseconds waiter_liveness{2000};
/// The lease a hand-off grants: short, so a grant to a waiter that died just after its last
/// refresh frees the lock soon; the new owner's watchdog extends it to its own lease at once.
inline constexpr std::chrono::milliseconds handoff_lease{2000};

struct lock_protocol {
    lock_kind kind;
    const script* acquire;
    const script* release;
    const script* renew;
    const script* leave;  ///< queued kinds, and the exclusive kind's registered waiters
    /// Suffixes appended to <prefix>:{name} after the first key (which has none).
    std::vector<std::string_view> key_suffixes;
    /// Queued: a waiter keeps one token for the whole wait (its place in the queue), refreshes
    /// its liveness while waiting, sleeps on its own channel for a hand-off, and leaves the
    /// queue when it gives up.
    bool queued = false;
};

/// The protocol of `kind` on Redis; nullptr when its scripts are not part of this build.
const lock_protocol* protocol_for(lock_kind kind) noexcept;

}  // namespace dlock::redis::detail
