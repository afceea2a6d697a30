// Saturating steady-clock arithmetic: `forever` and far deadlines must never overflow.
#pragma once

#include <algorithm>
#include <chrono>

namespace dlock::detail {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// now + d, clamped to [now, time_point::max()]; negative d counts as 0.
inline steady::time_point deadline_after(steady::time_point now, milliseconds d) noexcept {
    if (d <= milliseconds::zero()) return now;
    const auto room = std::chrono::duration_cast<milliseconds>(steady::time_point::max() - now);
    if (d >= room) return steady::time_point::max();
    return now + d;
}

/// Time from now until t in whole milliseconds, rounded down, never negative.
inline milliseconds remaining(steady::time_point now, steady::time_point t) noexcept {
    if (t <= now) return milliseconds::zero();
    return std::chrono::duration_cast<milliseconds>(t - now);
}

/// poll(2)'s timeout from now until `deadline`: -1 (none) for time_point::max(), else whole
/// milliseconds rounded up, within [0, 60 s] (the caller polls again after a minute).
inline int poll_timeout_ms(steady::time_point now, steady::time_point deadline) noexcept {
    if (deadline == steady::time_point::max()) return -1;
    const auto left = std::chrono::ceil<milliseconds>(deadline - now).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

}  // namespace dlock::detail
