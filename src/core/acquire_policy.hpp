// The acquire loop every backend runs, as a step function free of I/O and of the clock: the
// engine makes the attempts, waits and subscriptions; this decides what comes next and which
// observer event goes with it, so the contract of backend::acquire_until (the order of the
// give-up checks, when wait_started is sent, which failures are reported as error events) is
// written once.
//
//   start ─▶ attempt ─granted──────────────────────────────▶ done
//               │      failed ─────────────────────────────▶ give_up(its error)  [error event]
//               │      contended, cancel requested ────────▶ give_up(canceled)
//               │      contended, max_attempts reached ────▶ give_up(attempts_exhausted)
//               │      contended, deadline passed ─────────▶ give_up(timeout)
//               │      contended, first time ──────────────▶ subscribe | wait  [wait_started]
//               │      contended ──────────────────────────▶ wait until min(deadline, hint)
//   subscribed / woke: cancel requested ───────────────────▶ give_up(canceled)
//   subscribed, caught up ─────────────────────────────────▶ wait until min(deadline, hint)
//                      otherwise ──────────────────────────▶ attempt
//
// A wait always ends in one more attempt (the deadline's own included), so a release during the
// last wait is never missed. Not thread-safe: one policy per acquire call.
#pragma once

#include <cstdint>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/options.hpp>

#include "core/time.hpp"

namespace dlock::detail {

/// What the engine's last attempt found.
struct attempt_report {
    enum class result : std::uint8_t {
        granted,    ///< the caller holds the lock (an attempt's reply, or a hand-off message)
        contended,  ///< someone else holds it (or a quorum saw it held)
        failed,     ///< the backend failed; `error` says how
    };
    result what = result::contended;
    /// contended: re-attempt by then even without a notification (e.g. when the holder's lease
    /// runs out: a crashed holder sends none). max(): only a notification or the deadline.
    steady::time_point retry_at = steady::time_point::max();
    std::error_code error;  ///< failed: why

    static attempt_report granted() noexcept { return {result::granted, {}, {}}; }
    static attempt_report contended(steady::time_point retry_at = steady::time_point::max()) {
        return {result::contended, retry_at, {}};
    }
    static attempt_report failed(std::error_code ec) noexcept { return {result::failed, {}, ec}; }
};

/// The policy's answer: what to do now, and the observer event to send first (if any).
struct acquire_step {
    enum class action : std::uint8_t {
        attempt,    ///< make an attempt now, then call next()
        subscribe,  ///< set up the release notification, then call subscribed()
        wait,       ///< wait for a notification or `until`, whichever comes first, then woke()
        give_up,    ///< fail with `error`; nothing is held (the engine cleans up what it made)
        done,       ///< granted: return the lease
    };
    action what = action::attempt;
    steady::time_point until = steady::time_point::max();  ///< wait: the latest wake-up
    std::error_code error;                                 ///< give_up: the code to return
    /// The event to send before acting: wait_started (the caller begins to wait) or error (a
    /// backend failure; contention and cancellation are not errors). acquired is sent with the
    /// grant itself (it carries the fencing token).
    std::optional<event_kind> event;
};

class acquire_policy {
public:
    /// Notification style of the backend. A notification set up after the attempt that saw the
    /// lock held (Redis pub/sub) misses a release in between: the first contention subscribes and
    /// attempts again at once. A watch set together with the read (ZooKeeper exists/getChildren)
    /// needs no extra attempt: the first contention waits.
    enum class notification : std::uint8_t { subscribe_then_retry, watch_with_read };

    /// `deadline`: backend::acquire_until's bound (a past one means exactly one attempt);
    /// options.max_attempts and options.cancel as documented on lock_options; options.wait is not
    /// read (the deadline is the bound).
    acquire_policy(const lock_options& options, steady::time_point deadline,
                   notification style = notification::subscribe_then_retry) noexcept;

    /// The first step: attempt, or give_up(canceled) when the cancel token has fired already.
    acquire_step start() noexcept;
    /// After an attempt: `now` is read after it returned.
    acquire_step next(steady::time_point now, const attempt_report& report) noexcept;
    /// After the subscribe step: attempt again at once (or give up if canceled meanwhile).
    /// `caught_up`: the notification was already in place, without a break, before the attempt
    /// that saw the lock held (a channel subscribed for an earlier wait), so nothing can have
    /// been missed: wait right away instead, until min(deadline, that attempt's retry time).
    acquire_step subscribed(bool caught_up = false) noexcept;
    /// After a wait (notification, timeout or cancel): attempt again, or give_up(canceled).
    acquire_step woke() noexcept;

    /// The message of a give_up step the policy decided (not an attempt's own failure), about
    /// `what` (e.g. `lock "orders"`): "waiting for <what> was canceled", "<what> still held after
    /// N attempts", "<what> is held by someone else".
    std::string give_up_message(const acquire_step& step, std::string_view what) const;

    /// Attempts reported so far (granted, contended and failed alike).
    unsigned attempts() const noexcept { return attempts_; }
    /// True once a contended attempt started the wait (wait_started was sent).
    bool waiting() const noexcept { return waiting_; }
    steady::time_point deadline() const noexcept { return deadline_; }

private:
    acquire_step attempt_or_cancel() noexcept;
    static acquire_step give_up(errc code, std::optional<event_kind> event = {}) noexcept;

    steady::time_point deadline_;
    std::optional<unsigned> max_attempts_;
    std::stop_token cancel_;
    notification style_;
    unsigned attempts_ = 0;
    bool waiting_ = false;
    steady::time_point retry_at_ = steady::time_point::max();  // the latest contended report's
};

/// The one answer of every backend to lock_request::reenter naming a lease that is not a live
/// reentrant grant of the same lock from the same client (another client's, another lock's, an
/// empty or a released one): errc::not_owner (backend.hpp). Sets `ec` with a message naming the
/// lock and `why`.
void refuse_reentry(std::string_view name, std::string_view why, std::error_code& ec);

}  // namespace dlock::detail
