// dlock::lease and its shared state machine (core/lease_core.hpp), driven by an in-memory
// lease_owner: no backend, no I/O. State transitions are stepped with an explicit `now`.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>

#include "core/lease_core.hpp"
#include "core/status.hpp"
#include "fakes.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::errc;
using dlock::lock_state;
using dlock::detail::lease_access;
using dlock::detail::lease_core;
using steady = dlock::detail::steady;

using dlock_test::fake_owner;

const steady::time_point t0 = steady::time_point{} + 1000h;

std::shared_ptr<lease_core> make_core(const std::shared_ptr<fake_owner>& owner, std::string name,
                                      std::uint64_t fencing, steady::time_point granted,
                                      steady::time_point valid_until,
                                      dlock::lock_options options = {}) {
    return std::make_shared<lease_core>(owner, std::move(name), "0123456789abcdef0123456789abcdef",
                                        fencing, options, granted, valid_until);
}

// A lease valid for an hour of real time, so the observers that read the clock see it held.
dlock::lease make_live_lease(const std::shared_ptr<fake_owner>& owner, std::string name,
                             std::uint64_t fencing) {
    const auto now = steady::now();
    return lease_access::make(make_core(owner, std::move(name), fencing, now, now + 1h));
}

// ---- empty lease ----------------------------------------------------------------------------

TEST(EmptyLease, ObserversReportNothingHeld) {
    const dlock::lease l;
    EXPECT_FALSE(static_cast<bool>(l));
    EXPECT_EQ(l.state(), lock_state::lost);
    EXPECT_EQ(l.expires_in(), 0ms);
    EXPECT_TRUE(l.name().empty());
    EXPECT_TRUE(l.lost_token().stop_requested());
}

TEST(EmptyLease, FencingTokenThrowsNotOwner) {
    const dlock::lease l;
    try {
        (void)l.fencing_token();
        FAIL() << "did not throw";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::not_owner);
        EXPECT_NE(std::string(e.what()).find("empty lease"), std::string::npos) << e.what();
    }
}

TEST(EmptyLease, ReleaseSetsNotOwner) {
    dlock::lease l;
    std::error_code ec;
    l.release(ec);
    EXPECT_EQ(ec, errc::not_owner);
    try {
        l.release();
        FAIL() << "did not throw";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::not_owner);
    }
}

TEST(EmptyLease, MovesStayEmpty) {
    dlock::lease a;
    dlock::lease b(std::move(a));
    EXPECT_FALSE(static_cast<bool>(b));
    a = std::move(b);
    EXPECT_FALSE(static_cast<bool>(a));
    EXPECT_EQ(a.state(), lock_state::lost);
}

TEST(LockStateToString, Names) {
    EXPECT_STREQ(dlock::to_string(lock_state::held), "held");
    EXPECT_STREQ(dlock::to_string(lock_state::uncertain), "uncertain");
    EXPECT_STREQ(dlock::to_string(lock_state::lost), "lost");
}

// ---- lease_core state machine ---------------------------------------------------------------

TEST(LeaseCore, HeldUntilValidUntilThenLost) {
    auto owner = std::make_shared<fake_owner>();
    const auto core = make_core(owner, "a", 7, t0, t0 + 10s);
    EXPECT_EQ(core->state(t0), lock_state::held);
    EXPECT_EQ(core->state(t0 + 10s - 1ns), lock_state::held);
    EXPECT_EQ(core->state(t0 + 10s), lock_state::lost);
    EXPECT_EQ(core->valid_until(), t0 + 10s);
    EXPECT_EQ(core->granted_at(), t0);
    EXPECT_EQ(core->fencing_token(), 7u);
    EXPECT_EQ(core->name(), "a");
    EXPECT_FALSE(core->lost_token().stop_requested());  // expiry is seen by the watchdog, not here
}

TEST(LeaseCore, PlanFollowsOptions) {
    auto owner = std::make_shared<fake_owner>();
    const auto core =
        make_core(owner, "a", 1, t0, t0 + 1s, {.lease = 9s, .renew = false, .max_hold = 1min});
    EXPECT_EQ(core->plan().lease, 9s);
    EXPECT_EQ(core->plan().every, 3s);
    EXPECT_FALSE(core->plan().renew);
    EXPECT_EQ(core->plan().max_hold, 1min);
}

TEST(LeaseCore, FailedRenewalIsUncertainUntilRenewed) {
    auto owner = std::make_shared<fake_owner>();
    const auto core = make_core(owner, "a", 1, t0, t0 + 10s);
    core->renewal_failed();
    EXPECT_EQ(core->state(t0 + 1s), lock_state::uncertain);
    EXPECT_EQ(core->valid_until(), t0 + 10s);  // validity unchanged
    EXPECT_EQ(core->state(t0 + 10s), lock_state::lost);
    core->renewed(t0 + 20s);
    EXPECT_EQ(core->state(t0 + 1s), lock_state::held);
    EXPECT_EQ(core->valid_until(), t0 + 20s);
    EXPECT_EQ(core->state(t0 + 15s), lock_state::held);
}

TEST(LeaseCore, RenewalSetsValidityEvenWhenItShortensIt) {
    // A renewal sent at t with lease L makes the server's key expire at about t + L: the client's
    // validity is exactly what that renewal proves, even below an earlier, longer grant (a
    // hand-off's 2 s lease renewed to a 1 s lease).
    auto owner = std::make_shared<fake_owner>();
    const auto core = make_core(owner, "a", 1, t0, t0 + 10s);
    core->renewed(t0 + 30s);
    EXPECT_EQ(core->valid_until(), t0 + 30s);
    core->renewed(t0 + 5s);
    EXPECT_EQ(core->valid_until(), t0 + 5s);
    EXPECT_EQ(core->state(t0 + 6s), lock_state::lost);
}

TEST(LeaseCore, LoseFiresTokenCallbackAndEventOnce) {
    auto owner = std::make_shared<fake_owner>();
    std::vector<std::error_code> calls;
    const auto core = make_core(owner, "jobs/a", 42, t0, t0 + 10s,
                                {.on_lost = [&](std::error_code why) { calls.push_back(why); }});
    const auto token = core->lost_token();
    ASSERT_FALSE(token.stop_requested());

    EXPECT_TRUE(core->lose(errc::lock_lost));
    EXPECT_TRUE(token.stop_requested());
    EXPECT_EQ(core->state(t0), lock_state::lost);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0], errc::lock_lost);
    ASSERT_EQ(owner->events.size(), 1u);
    EXPECT_EQ(owner->events[0].kind, dlock::event_kind::lost);
    EXPECT_EQ(owner->events[0].name, "jobs/a");
    EXPECT_EQ(owner->events[0].fencing_token, 42u);
    EXPECT_EQ(owner->events[0].error, errc::lock_lost);

    EXPECT_FALSE(core->lose(errc::connection_failed));
    EXPECT_EQ(calls.size(), 1u);
    EXPECT_EQ(owner->events.size(), 1u);
}

TEST(LeaseCore, LostIsFinal) {
    auto owner = std::make_shared<fake_owner>();
    const auto core = make_core(owner, "a", 1, t0, t0 + 10s);
    core->lose(errc::lock_lost);
    core->renewed(t0 + 60s);
    EXPECT_EQ(core->state(t0 + 1s), lock_state::lost);
    core->renewal_failed();
    EXPECT_EQ(core->state(t0 + 1s), lock_state::lost);
}

TEST(LeaseCore, ThrowingOnLostCallbackIsReported) {
    auto owner = std::make_shared<fake_owner>();
    const auto core =
        make_core(owner, "jobs/b", 1, t0, t0 + 10s,
                  {.on_lost = [](std::error_code) { throw std::runtime_error("boom"); }});
    EXPECT_TRUE(core->lose(errc::lock_lost));
    ASSERT_EQ(owner->reported.size(), 1u);
    EXPECT_EQ(owner->reported[0].code, errc::lock_lost);
    EXPECT_NE(owner->reported[0].what.find("jobs/b"), std::string::npos) << owner->reported[0].what;
    EXPECT_NE(owner->reported[0].what.find("boom"), std::string::npos) << owner->reported[0].what;
    EXPECT_TRUE(core->lost_token().stop_requested());
}

TEST(LeaseCore, NonStandardExceptionFromOnLostIsReported) {
    auto owner = std::make_shared<fake_owner>();
    const auto core =
        make_core(owner, "jobs/c", 1, t0, t0 + 10s, {.on_lost = [](std::error_code) { throw 17; }});
    EXPECT_TRUE(core->lose(errc::lock_lost));
    ASSERT_EQ(owner->reported.size(), 1u);
    EXPECT_NE(owner->reported[0].what.find("jobs/c"), std::string::npos);
}

TEST(LeaseCore, ReleaseFiresTokenButNotOnLost) {
    auto owner = std::make_shared<fake_owner>();
    int calls = 0;
    const auto core =
        make_core(owner, "a", 1, t0, t0 + 10s, {.on_lost = [&](std::error_code) { ++calls; }});
    EXPECT_TRUE(core->mark_released());
    EXPECT_FALSE(core->mark_released());
    EXPECT_TRUE(core->released());
    EXPECT_TRUE(core->lost_token().stop_requested());
    EXPECT_EQ(core->state(t0), lock_state::lost);
    EXPECT_FALSE(core->lose(errc::lock_lost));
    EXPECT_EQ(calls, 0);
}

// ---- lease over a core ----------------------------------------------------------------------

TEST(Lease, ObserversOfAHeldGrant) {
    auto owner = std::make_shared<fake_owner>();
    auto l = make_live_lease(owner, "stock/sku-42", 99);
    EXPECT_TRUE(static_cast<bool>(l));
    EXPECT_EQ(l.name(), "stock/sku-42");
    EXPECT_EQ(l.fencing_token(), 99u);
    EXPECT_EQ(l.state(), lock_state::held);
    EXPECT_GT(l.expires_in(), 59min);
    EXPECT_LE(l.expires_in(), 1h);
    EXPECT_FALSE(l.lost_token().stop_requested());
}

TEST(Lease, ExpiredGrantReportsLostAndZero) {
    auto owner = std::make_shared<fake_owner>();
    const auto now = steady::now();
    auto l = lease_access::make(make_core(owner, "a", 1, now - 2s, now - 1s));
    EXPECT_TRUE(static_cast<bool>(l));  // still owns the grant object...
    EXPECT_EQ(l.state(), lock_state::lost);
    EXPECT_EQ(l.expires_in(), 0ms);
    EXPECT_EQ(l.fencing_token(), 1u);
}

TEST(Lease, LostGrantExpiresInZeroEvenBeforeValidUntil) {
    auto owner = std::make_shared<fake_owner>();
    auto l = make_live_lease(owner, "a", 1);
    lease_access::core(l)->lose(errc::lock_lost);
    EXPECT_EQ(l.state(), lock_state::lost);
    EXPECT_EQ(l.expires_in(), 0ms);
    EXPECT_TRUE(l.lost_token().stop_requested());
}

TEST(Lease, ReleaseEmptiesAndFiresToken) {
    auto owner = std::make_shared<fake_owner>();
    auto l = make_live_lease(owner, "a", 1);
    const auto token = l.lost_token();
    std::error_code ec = errc::timeout;
    l.release(ec);
    EXPECT_FALSE(ec);
    EXPECT_EQ(owner->releases, 1);
    EXPECT_FALSE(static_cast<bool>(l));
    EXPECT_TRUE(token.stop_requested());
    l.release(ec);
    EXPECT_EQ(ec, errc::not_owner);
    EXPECT_EQ(owner->releases, 1);
}

TEST(Lease, ThrowingReleaseReportsBackendError) {
    auto owner = std::make_shared<fake_owner>();
    owner->release_result = errc::lock_lost;
    auto l = make_live_lease(owner, "a", 1);
    try {
        l.release();
        FAIL() << "did not throw";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::lock_lost);
        EXPECT_NE(std::string(e.what()).find("fake release failure"), std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(static_cast<bool>(l));  // empty afterwards; the grant expires on the server
    EXPECT_EQ(owner->releases, 1);
}

TEST(Lease, DestructorReleasesOnce) {
    auto owner = std::make_shared<fake_owner>();
    { auto l = make_live_lease(owner, "a", 1); }
    EXPECT_EQ(owner->releases, 1);
    EXPECT_TRUE(owner->reported.empty());
}

TEST(Lease, DestructorReportsFailedReleaseWithoutThrowing) {
    auto owner = std::make_shared<fake_owner>();
    owner->release_result = errc::lock_lost;
    { auto l = make_live_lease(owner, "jobs/x", 1); }
    ASSERT_EQ(owner->reported.size(), 1u);
    EXPECT_EQ(owner->reported[0].code, errc::lock_lost);
    EXPECT_NE(owner->reported[0].what.find("jobs/x"), std::string::npos) << owner->reported[0].what;

    owner->release_result = errc::connection_failed;
    { auto l = make_live_lease(owner, "jobs/y", 2); }
    ASSERT_EQ(owner->reported.size(), 2u);
    EXPECT_EQ(owner->reported[1].code, errc::connection_failed);
    EXPECT_NE(owner->reported[1].what.find("jobs/y"), std::string::npos) << owner->reported[1].what;
    EXPECT_NE(owner->reported[1].what.find("fake release failure"), std::string::npos);
}

TEST(Lease, MoveTransfersOwnership) {
    auto owner = std::make_shared<fake_owner>();
    auto a = make_live_lease(owner, "a", 5);
    dlock::lease b(std::move(a));
    EXPECT_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move): documented state
    EXPECT_EQ(a.state(), lock_state::lost);
    ASSERT_TRUE(static_cast<bool>(b));
    EXPECT_EQ(b.fencing_token(), 5u);
    EXPECT_EQ(owner->releases, 0);
}

TEST(Lease, MoveAssignReleasesTheOldGrantFirst) {
    auto owner = std::make_shared<fake_owner>();
    auto a = make_live_lease(owner, "old", 1);
    auto b = make_live_lease(owner, "new", 2);
    const auto old_token = a.lost_token();
    a = std::move(b);
    EXPECT_EQ(owner->releases, 1);
    ASSERT_EQ(owner->released_names.size(), 1u);
    EXPECT_EQ(owner->released_names[0], "old");
    EXPECT_TRUE(old_token.stop_requested());
    EXPECT_EQ(a.name(), "new");
    EXPECT_EQ(a.fencing_token(), 2u);
    EXPECT_FALSE(static_cast<bool>(b));  // NOLINT(bugprone-use-after-move)
}

TEST(Lease, SelfMoveAssignKeepsTheGrant) {
    auto owner = std::make_shared<fake_owner>();
    auto a = make_live_lease(owner, "a", 3);
    auto& alias = a;
    a = std::move(alias);
    EXPECT_TRUE(static_cast<bool>(a));
    EXPECT_EQ(a.fencing_token(), 3u);
    EXPECT_EQ(owner->releases, 0);
}

}  // namespace
