// Lease and renewal arithmetic, free of I/O and of the clock: callers pass `now`.
//
// Validity is conservative (docs/redis-lock.md): a grant or renewal sent at `sent` with lease L is
// trusted until sent + L - drift(L), drift(L) = L/100 + 2ms by default, which covers the server's
// expiry granularity and clock-rate differences between client and server.
#pragma once

#include <algorithm>
#include <optional>

#include <dlock/options.hpp>

#include "core/time.hpp"

namespace dlock::detail {

struct renewal_plan {
    bool renew = true;
    milliseconds lease{};
    milliseconds every{};
    milliseconds max_hold = forever;
};

inline renewal_plan make_renewal_plan(const lock_options& o) noexcept {
    return {o.renew, o.lease, o.renew_every.value_or(o.lease / 3), o.max_hold};
}

/// The margin subtracted from every lease: ratio x lease + floor (Redlock's clock-drift term).
struct drift_model {
    double ratio = 0.01;
    milliseconds floor{2};
};

inline milliseconds drift_for(milliseconds lease, drift_model model = {}) noexcept {
    return std::chrono::duration_cast<milliseconds>(lease * model.ratio) + model.floor;
}

/// Until when a grant/renewal of `lease` sent at `sent` may be trusted.
inline steady::time_point valid_until(steady::time_point sent, milliseconds lease,
                                      drift_model model = {}) noexcept {
    return sent + lease - std::min(drift_for(lease, model), lease);
}

/// The lease to request at `now` for a grant made at `granted`: the plan's lease, cut so the key
/// expires at granted + max_hold. nullopt once max_hold is used up (stop renewing).
inline std::optional<milliseconds> lease_to_request(const renewal_plan& p,
                                                    steady::time_point granted,
                                                    steady::time_point now) noexcept {
    if (p.max_hold == forever) return p.lease;
    const auto left = remaining(now, deadline_after(granted, p.max_hold));
    if (left <= milliseconds::zero()) return std::nullopt;
    return std::min(p.lease, left);
}

/// When the watchdog should next renew, after a successful grant or renewal sent at `sent`.
inline steady::time_point next_renewal_at(const renewal_plan& p, steady::time_point granted,
                                          steady::time_point sent) noexcept {
    if (!p.renew) return steady::time_point::max();
    const auto at = sent + p.every;
    if (!lease_to_request(p, granted, at)) return steady::time_point::max();
    return at;
}

/// How soon to retry a renewal that failed (server unreachable), until the lease runs out.
inline milliseconds renewal_retry_delay(const renewal_plan& p) noexcept {
    return std::clamp(p.every / 10, milliseconds(10), milliseconds(1000));
}

}  // namespace dlock::detail
