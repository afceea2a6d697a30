// The pure rules of the Redis acquire path, free of I/O and of the clock (callers pass `now`):
// the hand-off message and the ticket rule that decides whether one grants this waiter
// (docs/lock-family.md, "Hand-off"), the validity of such a grant, and when a contended waiter
// attempts again without a notification. The engine (engine.cpp) and the waiter strategies
// (waiter.hpp) do the I/O around them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/renewal.hpp"
#include "core/time.hpp"

namespace dlock::redis::detail {

using dlock::detail::steady;

/// A hand-off message "granted <fencing token> <ticket> <waiter token>", as published by
/// dlock_publish_grant (src/redis/lua/lib/queue.lua). `token` points into the parsed text.
struct handoff_message {
    std::uint64_t fence = 0;
    std::uint64_t ticket = 0;
    std::string_view token;
};

/// Parses a hand-off message; nullopt for anything else (including the forms of earlier
/// versions, which a refresh then resolves).
std::optional<handoff_message> parse_handoff(std::string_view m);

/// The client part of a queued kind's token "<kind>:<client>.<random>": everything before the
/// last '.' (the whole token without one). The client's hand-off channel for a lock is
/// "<release channel>:<this>".
std::string_view handoff_client(std::string_view token) noexcept;

/// A grant by hand-off: the fencing token, and the validity counted from the send time of the
/// refresh that the grant answered.
struct handoff_grant {
    std::uint64_t fence = 0;
    steady::time_point sent;         ///< the refresh's send time (the lease counts from it)
    steady::time_point valid_until;  ///< sent + min(its lease, handoff_lease) - drift
};

/// The ticket rule of one queued waiter (docs/lock-family.md): a "granted <fence> <ticket>
/// <token>" is ours only if it names our token and its ticket is the one our latest refresh
/// answered "not yet" with. The grant came after the server processed that refresh, so its
/// validity counts from the refresh's send time, bounded by the hand-off lease and by the lease
/// that refresh asked for (max_hold included). Not thread-safe: one per acquire call.
class handoff_ticket {
public:
    /// A refresh sent at `sent` asking for `lease` answered "not yet" with `ticket`. A "not
    /// yet" without a ticket (0) matches no grant message: such a wait ends through a refresh
    /// answering {1, fence}.
    void not_yet(std::uint64_t ticket, steady::time_point sent,
                 std::chrono::milliseconds lease) noexcept;
    /// The highest ticket this waiter was told so far, sent with each refresh: a new queue entry
    /// gets a higher one.
    std::uint64_t floor() const noexcept { return highest_; }
    /// The ticket of the latest "not yet"; 0: none yet (or that reply carried none).
    std::uint64_t current() const noexcept { return ticket_; }
    /// Whether `message` (a hand-off channel's latest payload) grants the current entry of the
    /// waiter whose token is `token`, and the grant is still valid at `now`. nullopt otherwise:
    /// not a grant, another waiter's, an older entry's (a paused waiter re-queued since), or ours
    /// with its validity passed (the next refresh answers {1, fence} if the key still names us,
    /// else re-queues us with a new ticket, so the message never matches again).
    std::optional<handoff_grant> accept(std::string_view message, std::string_view token,
                                        steady::time_point now,
                                        dlock::detail::drift_model drift) const;

private:
    std::uint64_t ticket_ = 0;
    std::uint64_t highest_ = 0;
    steady::time_point refreshed_at_ = steady::time_point::min();
    std::chrono::milliseconds refresh_lease_{0};
};

/// Redlock's grant by message (docs/redlock.md, "Waiting"): each node hands its free key to its
/// own head and tells it "granted <fence> <ticket> <id>" (src/redis/lua/lib/queue.lua,
/// dlock_hand_mutex_head). One handoff_ticket per node: a node's message counts only for the entry
/// the waiter's latest attempt there was told "held" with, so its validity counts from that
/// attempt's send time. The waiter holds once such grants from a quorum of nodes reached it, all
/// at one fencing token (each of those nodes' counters then holds the token, as Redlock's
/// write-back asks); grants that disagree on the token leave it to an attempt, which writes back.
/// Not thread-safe: one per acquire call.
class quorum_handoff {
public:
    explicit quorum_handoff(std::size_t nodes) : tickets_(nodes) {}
    /// Node `node` answered an attempt sent at `sent` asking for `lease` with "held" and `ticket`
    /// (0: none).
    void not_yet(std::size_t node, std::uint64_t ticket, steady::time_point sent,
                 std::chrono::milliseconds lease) noexcept;
    /// The waiter's entries went from every node (the undo of a split, a leave): no message sent
    /// for them counts any more; the next attempt registers again with higher tickets.
    void forget() noexcept;
    /// The highest ticket any node told so far (sent with each attempt).
    std::uint64_t floor() const noexcept;
    /// Whether the nodes' latest messages (`messages[i]`: node i's, empty: none) grant the waiter
    /// whose id is `token`, by a majority of the nodes at one fence, still valid at `now`. The
    /// grant's `sent` and `valid_until` are the earliest of the counted nodes'.
    std::optional<handoff_grant> accept(const std::vector<std::string>& messages,
                                        std::string_view token, steady::time_point now,
                                        dlock::detail::drift_model drift) const;
    /// How many nodes' messages grant it (each by its ticket, still valid), whatever their fences.
    std::size_t granting(const std::vector<std::string>& messages, std::string_view token,
                         steady::time_point now, dlock::detail::drift_model drift) const;

private:
    /// The grants each node's message makes by that node's ticket rule, in node order.
    std::vector<handoff_grant> accepted(const std::vector<std::string>& messages,
                                        std::string_view token, steady::time_point now,
                                        dlock::detail::drift_model drift) const;

    std::vector<handoff_ticket> tickets_;
};

/// A uniformly random value in [0, bound_ns] (dlock::detail::random_jitter_ns; tests pass a
/// fixed one).
using jitter_source = long long (*)(long long bound_ns) noexcept;

/// What a contended attempt found, as far as the re-check time goes.
struct contention {
    /// The holder's smallest remaining lease among the servers that hold (a key handed to a
    /// waiter: its hand-off lease); -1: unknown (a key set without an expiry).
    std::int64_t holder_ms = -1;
    /// Servers whose grant to us landed although no quorum did (a split vote).
    std::size_t granting = 0;
};

/// When a contended waiter attempts again even without a notification. Pub/sub is lossy and a
/// crashed holder sends nothing: the holder's remaining lease bounds the sleep (unknown: our own
/// `lease`). A key handed to a waiter that never takes it up runs out with the hand-off lease and
/// publishes nothing either. `keeps_entry_alive` (a queued waiter, a registered mutex waiter):
/// also by waiter_liveness / 3, the refresh of its entry's liveness, which is also the bounded
/// re-check for a missed hand-off. Plus up to 2 ms of jitter. A split vote (`granting` > 0) retries
/// after a random delay of up to 2 * node_timeout instead, if sooner, so contenders do not split
/// again in lock step.
steady::time_point retry_at(steady::time_point now, const contention& found,
                            std::chrono::milliseconds lease, bool keeps_entry_alive,
                            std::chrono::milliseconds node_timeout, jitter_source jitter);

}  // namespace dlock::redis::detail
