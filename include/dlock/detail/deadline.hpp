// Conversion of the std timed-lock arguments (a duration, or a time_point of any clock) to the one
// steady_clock deadline the backends take, shared by the Lockable types (mutex, multi_lock).
// Saturating: `forever`, `duration::max()` and far or coarse time_points never overflow.
// Pure functions of their argument and the clocks' now(); safe from any thread.
#pragma once

#include <chrono>
#include <type_traits>

namespace dlock::detail {

/// steady now + `timeout`, clamped to [now, steady_clock::time_point::max()]. A zero or negative
/// timeout gives now (one attempt).
template <class Rep, class Period>
std::chrono::steady_clock::time_point steady_deadline_after(
    const std::chrono::duration<Rep, Period>& timeout) {
    const auto now = std::chrono::steady_clock::now();
    if (timeout <= timeout.zero()) return now;
    // Compare in the caller's unit: converting `forever` to nanoseconds would overflow.
    const auto room = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(
        std::chrono::steady_clock::time_point::max() - now);
    if (timeout >= room) return std::chrono::steady_clock::time_point::max();
    return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
}

/// `deadline` as a steady_clock time_point, converted once, now. A steady deadline passes through
/// (clamped to the representable range); another clock's deadline becomes steady now + the time
/// left on that clock, and a past one becomes steady now (one attempt).
template <class Clock, class Duration>
std::chrono::steady_clock::time_point steady_deadline(
    const std::chrono::time_point<Clock, Duration>& deadline) {
    using steady = std::chrono::steady_clock;
    if constexpr (std::is_same_v<Clock, steady>) {
        // Exact, but clamped: a coarse extreme deadline would overflow in nanoseconds.
        if (deadline >= std::chrono::floor<Duration>(steady::time_point::max())) {
            return steady::time_point::max();
        }
        if (deadline <= std::chrono::ceil<Duration>(steady::time_point::min())) {
            return steady::time_point::min();
        }
        return std::chrono::time_point_cast<steady::duration>(deadline);
    } else {
        // Subtract in the caller's unit, for the same reason, and only a later deadline from
        // an earlier now (min() - now would overflow too).
        const auto now = std::chrono::time_point_cast<Duration>(Clock::now());
        if (deadline <= now) return steady::now();
        return steady_deadline_after(deadline - now);
    }
}

}  // namespace dlock::detail
