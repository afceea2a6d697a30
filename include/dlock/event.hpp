// Lock events for observability: what happened to which lock, when. An `observer` is set on a
// client (client_options::observer) and is called from whichever thread caused the event (the
// caller's thread for acquire/release, the client's background thread for renewal and loss), with
// no dlock lock held. It must be thread-safe and quick; exceptions escaping it are caught and
// reported to the client's error handler. Silent by default (no observer).
// dlock::metrics (metrics.hpp) is a ready-made observer that aggregates these events.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>
#include <system_error>

#include <dlock/lease.hpp>

namespace dlock {

enum class event_kind {
    wait_started,  ///< the first attempt found the lock held; the caller now waits
    acquired,      ///< a grant; fencing_token is set
    renewed,       ///< the watchdog extended the lease
    released,      ///< the holder released it
    lost,          ///< the grant can no longer be guaranteed; error says why
    error,         ///< a backend failure while acquiring, renewing or releasing
    /// An acquire call ended without a grant: error is timeout, attempts_exhausted, canceled, or
    /// the failure (a backend failure is also reported as an error event just before).
    gave_up,
    /// The watchdog could not confirm the lease (held -> uncertain), once per episode; a renewed
    /// or lost event follows.
    renewal_failed,
    /// Redlock: one of the servers gave no usable answer to one vote on this lock (an acquire
    /// attempt, a renewal, a release): unreachable, timed out, refused (e.g. authentication),
    /// an error reply, or a server whose vote does not count. The call itself may still have
    /// succeeded on a quorum: the quorum is degraded. `server` names it, `detail` says why,
    /// `error` is the code. One event per server per vote; never for a single server.
    node_failed,
};

struct lock_event {
    event_kind kind;
    std::string_view name;            ///< the lock's name as the user gave it
    std::uint64_t fencing_token = 0;  ///< 0 when there is no grant (wait_started, error)
    std::error_code error;            ///< set for lost and error
    std::chrono::steady_clock::time_point at;
    /// acquired and gave_up: when the acquire call began (the wait is `at - since`); released and
    /// lost: when the grant was requested (the hold time is `at - since`). Epoch when unknown.
    std::chrono::steady_clock::time_point since{};
    /// lost: why the grant was lost; released: lost_reason::released.
    lost_reason reason = lost_reason::none;
    /// acquired: the releasing holder handed the lock directly to this waiter (the hand-off of a
    /// queued Redis kind: fair_mutex, the write side of shared_mutex; on Redlock, a
    /// dlock::mutex granted by a quorum of the servers' hand-offs); no attempt of ours won it.
    bool handed_off = false;
    /// acquired and gave_up: this acquire call emitted wait_started before (it waited in line).
    bool waited = false;
    /// node_failed: the server ("host:port" or the socket path; never a password) and why it
    /// failed (the failure's message). Empty for the other kinds.
    std::string_view server{};
    std::string_view detail{};
};

// Each grant's acquired event is followed by exactly one of released or lost (a release that finds
// the grant already gone reports lost, with its reason), so acquired - released - lost is the
// number of grants held. Each acquire call that reaches the backend ends with acquired or gave_up.

using observer = std::function<void(const lock_event&)>;

const char* to_string(event_kind kind) noexcept;

}  // namespace dlock
