// Lease and renewal arithmetic (core/renewal.hpp) and saturating deadlines (core/time.hpp),
// stepped with an explicit `now`: no clock is read except to pick realistic starting points.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <system_error>

#include <dlock/options.hpp>

#include "core/renewal.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::detail::deadline_after;
using dlock::detail::drift_for;
using dlock::detail::lease_to_request;
using dlock::detail::make_renewal_plan;
using dlock::detail::next_renewal_at;
using dlock::detail::poll_timeout_ms;
using dlock::detail::remaining;
using dlock::detail::renewal_plan;
using dlock::detail::renewal_retry_delay;
using dlock::detail::valid_until;
using steady = dlock::detail::steady;
using std::chrono::milliseconds;

// A fixed, arbitrary point well away from the clock's epoch.
const steady::time_point t0 = steady::time_point{} + 1000h;

// ---- time.hpp -------------------------------------------------------------------------------

TEST(DeadlineAfter, AddsOrdinaryDurations) {
    EXPECT_EQ(deadline_after(t0, 1ms), t0 + 1ms);
    EXPECT_EQ(deadline_after(t0, 30s), t0 + 30s);
    EXPECT_EQ(deadline_after(t0, dlock::max_lease), t0 + dlock::max_lease);
}

TEST(DeadlineAfter, ZeroAndNegativeMeanNow) {
    EXPECT_EQ(deadline_after(t0, 0ms), t0);
    EXPECT_EQ(deadline_after(t0, -1ms), t0);
    EXPECT_EQ(deadline_after(t0, milliseconds::min()), t0);
}

TEST(DeadlineAfter, ForeverSaturates) {
    EXPECT_EQ(deadline_after(t0, dlock::forever), steady::time_point::max());
    EXPECT_EQ(deadline_after(steady::now(), dlock::forever), steady::time_point::max());
    EXPECT_EQ(deadline_after(steady::time_point{}, dlock::forever), steady::time_point::max());
    EXPECT_EQ(deadline_after(t0, dlock::forever - 1ms), steady::time_point::max());
}

TEST(DeadlineAfter, SaturatesNearTheEndOfTime) {
    const auto late = steady::time_point::max() - 1ms;
    EXPECT_EQ(deadline_after(late, 2ms), steady::time_point::max());
    EXPECT_EQ(deadline_after(late, 1h), steady::time_point::max());
    EXPECT_EQ(deadline_after(steady::time_point::max(), 1ms), steady::time_point::max());
    // Still exact when there is room.
    const auto earlier = steady::time_point::max() - 1h;
    EXPECT_EQ(deadline_after(earlier, 1ms), earlier + 1ms);
    EXPECT_GE(deadline_after(earlier, 1ms), earlier);
}

TEST(Remaining, NeverNegative) {
    EXPECT_EQ(remaining(t0, t0), 0ms);
    EXPECT_EQ(remaining(t0, t0 - 1ns), 0ms);
    EXPECT_EQ(remaining(t0, t0 - 5s), 0ms);
    EXPECT_EQ(remaining(t0, steady::time_point::min()), 0ms);
}

TEST(Remaining, RoundsDownToWholeMilliseconds) {
    EXPECT_EQ(remaining(t0, t0 + 1500us), 1ms);
    EXPECT_EQ(remaining(t0, t0 + 999us), 0ms);
    EXPECT_EQ(remaining(t0, t0 + 30s), 30s);
    EXPECT_GT(remaining(t0, steady::time_point::max()), milliseconds(24h * 365 * 100));
}

TEST(PollTimeout, NoDeadlineWaitsForever) {
    EXPECT_EQ(poll_timeout_ms(t0, steady::time_point::max()), -1);
}

TEST(PollTimeout, RoundsUpWithinAMinute) {
    EXPECT_EQ(poll_timeout_ms(t0, t0), 0);
    EXPECT_EQ(poll_timeout_ms(t0, t0 - 5s), 0);
    EXPECT_EQ(poll_timeout_ms(t0, t0 + 1us), 1);
    EXPECT_EQ(poll_timeout_ms(t0, t0 + 1500us), 2);
    EXPECT_EQ(poll_timeout_ms(t0, t0 + 30s), 30'000);
    EXPECT_EQ(poll_timeout_ms(t0, t0 + 1h), 60'000);
}

// ---- renewal.hpp ----------------------------------------------------------------------------

TEST(MakeRenewalPlan, DefaultsRenewEveryThirdOfLease) {
    const auto p = make_renewal_plan({});
    EXPECT_TRUE(p.renew);
    EXPECT_EQ(p.lease, 30s);
    EXPECT_EQ(p.every, 10s);
    EXPECT_EQ(p.max_hold, dlock::forever);

    EXPECT_EQ(make_renewal_plan({.lease = 100ms}).every, 33ms);
    EXPECT_EQ(make_renewal_plan({.lease = 9s}).every, 3s);
}

TEST(MakeRenewalPlan, CopiesExplicitFields) {
    const auto p =
        make_renewal_plan({.lease = 6s, .renew = false, .renew_every = 1500ms, .max_hold = 1min});
    EXPECT_FALSE(p.renew);
    EXPECT_EQ(p.lease, 6s);
    EXPECT_EQ(p.every, 1500ms);
    EXPECT_EQ(p.max_hold, 1min);
}

TEST(DriftFor, OnePercentPlusTwoMilliseconds) {
    EXPECT_EQ(drift_for(30s), 302ms);
    EXPECT_EQ(drift_for(1s), 12ms);
    EXPECT_EQ(drift_for(50ms), 2ms);
    EXPECT_EQ(drift_for(dlock::max_lease), dlock::max_lease / 100 + 2ms);
}

TEST(ValidUntil, SubtractsDrift) {
    EXPECT_EQ(valid_until(t0, 30s), t0 + 30s - 302ms);
    EXPECT_EQ(valid_until(t0, 1s), t0 + 988ms);
}

TEST(ValidUntil, AlwaysConservativeAndNeverBeforeSent) {
    for (const milliseconds lease :
         {milliseconds(1), milliseconds(2), milliseconds(3), milliseconds(10), milliseconds(99),
          milliseconds(100), milliseconds(1s), milliseconds(30s), milliseconds(1h),
          dlock::max_lease}) {
        const auto v = valid_until(t0, lease);
        EXPECT_LT(v, t0 + lease) << lease.count();
        EXPECT_GE(v, t0) << lease.count();
    }
    // A lease shorter than the drift cannot be trusted at all.
    EXPECT_EQ(valid_until(t0, 1ms), t0);
    EXPECT_EQ(valid_until(t0, 2ms), t0);
    EXPECT_EQ(valid_until(t0, 3ms), t0 + 1ms);
}

TEST(LeaseToRequest, NoMaxHoldAlwaysFullLease) {
    const auto p = make_renewal_plan({.lease = 30s});
    EXPECT_EQ(lease_to_request(p, t0, t0), std::optional<milliseconds>(30s));
    EXPECT_EQ(lease_to_request(p, t0, t0 + 1000h), std::optional<milliseconds>(30s));
}

TEST(LeaseToRequest, CutToRemainingHold) {
    const auto p = make_renewal_plan({.lease = 30s, .max_hold = 45s});
    EXPECT_EQ(lease_to_request(p, t0, t0), std::optional<milliseconds>(30s));
    EXPECT_EQ(lease_to_request(p, t0, t0 + 10s), std::optional<milliseconds>(30s));
    EXPECT_EQ(lease_to_request(p, t0, t0 + 15s), std::optional<milliseconds>(30s));
    EXPECT_EQ(lease_to_request(p, t0, t0 + 20s), std::optional<milliseconds>(25s));
    EXPECT_EQ(lease_to_request(p, t0, t0 + 44s), std::optional<milliseconds>(1s));
    EXPECT_EQ(lease_to_request(p, t0, t0 + 44999ms), std::optional<milliseconds>(1ms));
}

TEST(LeaseToRequest, MaxHoldShorterThanLeaseCutsTheFirstGrant) {
    const auto p = make_renewal_plan({.lease = 30s, .max_hold = 10s});
    EXPECT_EQ(lease_to_request(p, t0, t0), std::optional<milliseconds>(10s));
    EXPECT_EQ(lease_to_request(p, t0, t0 + 4s), std::optional<milliseconds>(6s));
}

TEST(LeaseToRequest, NulloptOnceHoldIsUsedUp) {
    const auto p = make_renewal_plan({.lease = 30s, .max_hold = 10s});
    EXPECT_EQ(lease_to_request(p, t0, t0 + 10s), std::nullopt);
    EXPECT_EQ(lease_to_request(p, t0, t0 + 11s), std::nullopt);
    // Less than a whole millisecond left counts as used up (never round a lease up).
    EXPECT_EQ(lease_to_request(p, t0, t0 + 10s - 500us), std::nullopt);
}

TEST(LeaseToRequest, HugeMaxHoldDoesNotOverflow) {
    const auto p = make_renewal_plan({.lease = 30s, .max_hold = dlock::forever - 1ms});
    EXPECT_EQ(lease_to_request(p, t0, t0 + 1h), std::optional<milliseconds>(30s));
}

TEST(NextRenewalAt, EveryPeriodAfterSent) {
    const auto p = make_renewal_plan({.lease = 30s});
    EXPECT_EQ(next_renewal_at(p, t0, t0), t0 + 10s);
    EXPECT_EQ(next_renewal_at(p, t0, t0 + 10s + 3ms), t0 + 20s + 3ms);
    // Always before the conservative validity of the grant it renews.
    EXPECT_LT(next_renewal_at(p, t0, t0), valid_until(t0, p.lease));
}

TEST(NextRenewalAt, NeverWhenRenewIsOff) {
    const auto p = make_renewal_plan({.lease = 30s, .renew = false});
    EXPECT_EQ(next_renewal_at(p, t0, t0), steady::time_point::max());
}

TEST(NextRenewalAt, NeverOnceMaxHoldWouldBeExceeded) {
    const auto p = make_renewal_plan({.lease = 30s, .renew_every = 4s, .max_hold = 10s});
    EXPECT_EQ(next_renewal_at(p, t0, t0), t0 + 4s);
    EXPECT_EQ(next_renewal_at(p, t0, t0 + 4s), t0 + 8s);
    EXPECT_EQ(next_renewal_at(p, t0, t0 + 6s), steady::time_point::max());  // t0+10s: hold used up
    EXPECT_EQ(next_renewal_at(p, t0, t0 + 8s), steady::time_point::max());
}

// The watchdog declares a grant lost once valid_until() passes (src/redis/client.cpp renew_due),
// so every plan that validation accepts must schedule its first renewal strictly before that,
// with a period > 0 (a zero period renews in a tight loop).
TEST(RenewalPlan, UsualPlansRenewBeforeValidityEnds) {
    for (const milliseconds lease : {milliseconds(100), milliseconds(1s), milliseconds(30s),
                                     milliseconds(1h), dlock::max_lease}) {
        for (const auto& o : {dlock::lock_options{.lease = lease},
                              dlock::lock_options{.lease = lease, .renew_every = lease / 2}}) {
            const auto p = make_renewal_plan(o);
            EXPECT_GT(p.every, 0ms) << lease.count();
            EXPECT_LT(next_renewal_at(p, t0, t0), valid_until(t0, lease)) << lease.count();
        }
    }
}

// Every plan that validation accepts renews before its validity ends: a period in
// [lease - drift_for(lease), lease) would fall due after valid_until() (lease 1000ms, every 990ms:
// renewal at +990ms, validity ends at +988ms), and a 1-2 ms lease would have a 0 ms period.
TEST(RenewalPlan, EveryAcceptedPlanRenewsBeforeValidityEnds) {
    for (const milliseconds lease :
         {milliseconds(1), milliseconds(2), milliseconds(1s), milliseconds(30s)}) {
        for (const milliseconds every : {lease - 1ms, lease - drift_for(lease), lease / 3}) {
            for (const auto& o : {dlock::lock_options{.lease = lease, .renew_every = every},
                                  dlock::lock_options{.lease = lease}}) {
                std::error_code ec;
                dlock::detail::validate_lock_options(o, ec);
                if (ec) continue;  // rejected: fine
                const auto p = make_renewal_plan(o);
                SCOPED_TRACE("lease " + std::to_string(lease.count()) + "ms, every " +
                             std::to_string(p.every.count()) + "ms");
                EXPECT_GT(p.every, 0ms);
                EXPECT_LT(next_renewal_at(p, t0, t0), valid_until(t0, lease));
            }
        }
    }
}

TEST(RenewalRetryDelay, TenthOfPeriodClamped) {
    EXPECT_EQ(renewal_retry_delay(make_renewal_plan({.lease = 30s})), 1000ms);
    EXPECT_EQ(renewal_retry_delay(make_renewal_plan({.lease = 15s})), 500ms);
    EXPECT_EQ(renewal_retry_delay(make_renewal_plan({.lease = 6s, .renew_every = 2500ms})), 250ms);
    EXPECT_EQ(renewal_retry_delay(make_renewal_plan({.lease = 90ms})), 10ms);   // 3ms -> 10ms
    EXPECT_EQ(renewal_retry_delay(make_renewal_plan({.lease = 2ms})), 10ms);    // 0ms -> 10ms
    EXPECT_EQ(renewal_retry_delay(make_renewal_plan({.lease = 24h})), 1000ms);  // 48min -> 1s
}

}  // namespace
