// The sans-I/O skeleton every lock engine shares: the acquire step function
// (core/acquire_policy.hpp), the lease registry (core/lease_registry.hpp) and the quorum tallies
// (core/quorum.hpp) and the composite grant of the multi-lease types (core/composite_grant.hpp).
// Stepped with an explicit `now`; no clock is read.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <new>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/options.hpp>

#include "core/acquire_policy.hpp"
#include "core/composite_grant.hpp"
#include "core/engine_skeleton.hpp"
#include "core/lease_core.hpp"
#include "core/lease_registry.hpp"
#include "core/quorum.hpp"
#include "core/status.hpp"
#include "fakes.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::errc;
using dlock::event_kind;
using dlock::detail::acquire_policy;
using dlock::detail::acquire_step;
using dlock::detail::attempt_report;
using dlock::detail::lease_core;
using dlock::detail::lease_registry;
using steady = dlock::detail::steady;
using action = acquire_step::action;

const steady::time_point t0 = steady::time_point{} + 1000h;

// ---- acquire_policy ---------------------------------------------------------------------------

TEST(AcquirePolicy, GrantedAtOnceSendsNoWaitEvent) {
    acquire_policy p({}, t0 + 1s);
    EXPECT_EQ(p.start().what, action::attempt);
    const auto step = p.next(t0, attempt_report::granted());
    EXPECT_EQ(step.what, action::done);
    EXPECT_FALSE(step.event);
    EXPECT_EQ(p.attempts(), 1u);
    EXPECT_FALSE(p.waiting());
}

TEST(AcquirePolicy, PastDeadlineMeansExactlyOneAttemptAndNoWaitStarted) {
    acquire_policy p({}, t0);
    ASSERT_EQ(p.start().what, action::attempt);
    const auto step = p.next(t0, attempt_report::contended(t0 + 5s));
    EXPECT_EQ(step.what, action::give_up);
    EXPECT_EQ(step.error, errc::timeout);
    EXPECT_FALSE(step.event) << "try_lock never waits, so it never says it does";
    EXPECT_FALSE(p.waiting());
}

TEST(AcquirePolicy, SubscribeThenRetryOnFirstContention) {
    acquire_policy p({}, t0 + 10s, acquire_policy::notification::subscribe_then_retry);
    p.start();
    auto step = p.next(t0, attempt_report::contended(t0 + 3s));
    EXPECT_EQ(step.what, action::subscribe);
    EXPECT_EQ(step.event, event_kind::wait_started);
    EXPECT_TRUE(p.waiting());
    EXPECT_EQ(p.subscribed().what, action::attempt) << "a release before the subscription";
    step = p.next(t0 + 1ms, attempt_report::contended(t0 + 3s));
    EXPECT_EQ(step.what, action::wait);
    EXPECT_FALSE(step.event) << "wait_started is sent once";
    EXPECT_EQ(step.until, t0 + 3s) << "the retry hint bounds the wait";
    EXPECT_EQ(p.woke().what, action::attempt);
    EXPECT_EQ(p.next(t0 + 3s, attempt_report::granted()).what, action::done);
    EXPECT_EQ(p.attempts(), 3u);
}

TEST(AcquirePolicy, SubscribedAlreadyCaughtUpWaitsWithoutASecondAttempt) {
    acquire_policy p({}, t0 + 10s);
    p.start();
    ASSERT_EQ(p.next(t0, attempt_report::contended(t0 + 3s)).what, action::subscribe);
    const auto step = p.subscribed(/*caught_up=*/true);
    EXPECT_EQ(step.what, action::wait);
    EXPECT_EQ(step.until, t0 + 3s);
    EXPECT_FALSE(step.event);
}

TEST(AcquirePolicy, WatchWithReadWaitsOnFirstContention) {
    acquire_policy p({}, t0 + 10s, acquire_policy::notification::watch_with_read);
    p.start();
    const auto step = p.next(t0, attempt_report::contended());
    EXPECT_EQ(step.what, action::wait);
    EXPECT_EQ(step.event, event_kind::wait_started);
    EXPECT_EQ(step.until, t0 + 10s) << "no hint: the deadline bounds the wait";
}

TEST(AcquirePolicy, DeadlineBoundsAHintBeyondIt) {
    acquire_policy p({}, t0 + 1s, acquire_policy::notification::watch_with_read);
    p.start();
    EXPECT_EQ(p.next(t0, attempt_report::contended(t0 + 1h)).until, t0 + 1s);
}

TEST(AcquirePolicy, AWaitEndsInOneMoreAttemptAtTheDeadline) {
    acquire_policy p({}, t0 + 1s, acquire_policy::notification::watch_with_read);
    p.start();
    ASSERT_EQ(p.next(t0, attempt_report::contended()).what, action::wait);
    ASSERT_EQ(p.woke().what, action::attempt) << "even when woken by the deadline";
    const auto step = p.next(t0 + 1s, attempt_report::contended());
    EXPECT_EQ(step.what, action::give_up);
    EXPECT_EQ(step.error, errc::timeout);
    EXPECT_FALSE(step.event);
}

TEST(AcquirePolicy, MaxAttemptsCountsEveryAttemptAndComesBeforeTheDeadline) {
    dlock::lock_options o;
    o.max_attempts = 2;
    acquire_policy p(o, t0);  // the deadline has passed too: attempts_exhausted wins
    p.start();
    auto step = p.next(t0 - 1s, attempt_report::contended());
    ASSERT_EQ(step.what, action::subscribe);
    ASSERT_EQ(p.subscribed().what, action::attempt);
    step = p.next(t0, attempt_report::contended());
    EXPECT_EQ(step.what, action::give_up);
    EXPECT_EQ(step.error, errc::attempts_exhausted);
    EXPECT_FALSE(step.event);
}

TEST(AcquirePolicy, MaxAttemptsOneNeverWaits) {
    dlock::lock_options o;
    o.max_attempts = 1;
    acquire_policy p(o, steady::time_point::max(), acquire_policy::notification::watch_with_read);
    p.start();
    const auto step = p.next(t0, attempt_report::contended());
    EXPECT_EQ(step.error, errc::attempts_exhausted);
    EXPECT_FALSE(step.event) << "both backends: no wait_started without a wait";
}

TEST(AcquirePolicy, CancelBeforeTheFirstAttempt) {
    std::stop_source stop;
    stop.request_stop();
    dlock::lock_options o;
    o.cancel = stop.get_token();
    acquire_policy p(o, steady::time_point::max());
    const auto step = p.start();
    EXPECT_EQ(step.what, action::give_up);
    EXPECT_EQ(step.error, errc::canceled);
    EXPECT_FALSE(step.event) << "cancellation is not a backend error";
    EXPECT_EQ(p.attempts(), 0u);
}

TEST(AcquirePolicy, CancelDuringAWaitGivesUpOnWakeUp) {
    std::stop_source stop;
    dlock::lock_options o;
    o.cancel = stop.get_token();
    acquire_policy p(o, steady::time_point::max(), acquire_policy::notification::watch_with_read);
    p.start();
    ASSERT_EQ(p.next(t0, attempt_report::contended()).what, action::wait);
    stop.request_stop();
    EXPECT_EQ(p.woke().error, errc::canceled);
}

TEST(AcquirePolicy, CancelAfterAContendedAttemptGivesUpBeforeWaiting) {
    std::stop_source stop;
    dlock::lock_options o;
    o.cancel = stop.get_token();
    acquire_policy p(o, steady::time_point::max());
    p.start();
    stop.request_stop();
    const auto step = p.next(t0, attempt_report::contended());
    EXPECT_EQ(step.error, errc::canceled);
    EXPECT_FALSE(step.event);
    EXPECT_FALSE(p.waiting());
}

TEST(AcquirePolicy, CancelAfterAGrantStillReturnsTheGrant) {
    std::stop_source stop;
    dlock::lock_options o;
    o.cancel = stop.get_token();
    acquire_policy p(o, steady::time_point::max());
    p.start();
    stop.request_stop();
    EXPECT_EQ(p.next(t0, attempt_report::granted()).what, action::done);
}

TEST(AcquirePolicy, BackendFailureIsAnErrorEvent) {
    acquire_policy p({}, t0 + 1s);
    p.start();
    const auto step =
        p.next(t0, attempt_report::failed(dlock::make_error_code(errc::quorum_unreachable)));
    EXPECT_EQ(step.what, action::give_up);
    EXPECT_EQ(step.error, errc::quorum_unreachable);
    EXPECT_EQ(step.event, event_kind::error);
}

TEST(AcquirePolicy, FailureWithoutACodeIsAServerError) {
    acquire_policy p({}, t0 + 1s);
    p.start();
    EXPECT_EQ(p.next(t0, attempt_report::failed({})).error, errc::server_error);
}

TEST(AcquirePolicy, ContentionInsideTheAttemptIsNoErrorEvent) {
    // e.g. every pooled connection stayed busy until the caller's wait bound
    acquire_policy p({}, t0 + 1s);
    p.start();
    const auto step = p.next(t0, attempt_report::failed(dlock::make_error_code(errc::timeout)));
    EXPECT_EQ(step.error, errc::timeout);
    EXPECT_FALSE(step.event);
}

TEST(AcquirePolicy, FailureAfterWaitingStillGivesUp) {
    acquire_policy p({}, t0 + 10s, acquire_policy::notification::watch_with_read);
    p.start();
    p.next(t0, attempt_report::contended());
    p.woke();
    const auto step =
        p.next(t0 + 1s, attempt_report::failed(dlock::make_error_code(errc::connection_failed)));
    EXPECT_EQ(step.error, errc::connection_failed);
    EXPECT_EQ(step.event, event_kind::error);
}

TEST(AcquirePolicy, GiveUpMessages) {
    dlock::lock_options o;
    o.max_attempts = 2;
    acquire_policy p(o, steady::time_point::max(), acquire_policy::notification::watch_with_read);
    p.start();
    p.next(t0, attempt_report::contended());
    p.woke();
    const auto step = p.next(t0, attempt_report::contended());
    EXPECT_EQ(p.give_up_message(step, "lock \"a\""), "lock \"a\" still held after 2 attempts");
    acquire_step timeout;
    timeout.error = dlock::make_error_code(errc::timeout);
    EXPECT_EQ(p.give_up_message(timeout, "x"), "x is held by someone else");
    acquire_step canceled;
    canceled.error = dlock::make_error_code(errc::canceled);
    EXPECT_EQ(p.give_up_message(canceled, "x"), "waiting for x was canceled");
}

TEST(RefuseReentry, IsNotOwnerWithTheLockNamed) {
    std::error_code ec;
    dlock::detail::refuse_reentry("orders", "another client's lease", ec);
    EXPECT_EQ(ec, errc::not_owner);
    const auto text = dlock::detail::message_for(ec);
    EXPECT_NE(text.find("\"orders\""), std::string::npos) << text;
    EXPECT_NE(text.find("another client's lease"), std::string::npos) << text;
}

// ---- lease_registry -------------------------------------------------------------------------

class LeaseRegistry : public ::testing::Test {
protected:
    std::shared_ptr<lease_core> make(steady::time_point valid_until,
                                     std::chrono::milliseconds lease = 30s) {
        dlock::lock_options o;
        o.lease = lease;
        return std::make_shared<lease_core>(owner_, "l" + std::to_string(++n_), "tok", 1, o, t0,
                                            valid_until);
    }
    std::shared_ptr<dlock_test::fake_owner> owner_ = std::make_shared<dlock_test::fake_owner>();
    int n_ = 0;
};

TEST_F(LeaseRegistry, DueInOrderOfDueTime) {
    lease_registry r;
    auto a = make(t0 + 30s), b = make(t0 + 30s), c = make(t0 + 30s);
    r.track(a, t0 + 20s);
    r.track(b, t0 + 10s);
    r.track(c, t0 + 15s);
    EXPECT_EQ(r.next_due(), t0 + 10s);
    EXPECT_TRUE(r.due(t0 + 5s).renew.empty());
    auto batch = r.due(t0 + 10s);
    ASSERT_EQ(batch.renew.size(), 1u);
    EXPECT_EQ(batch.renew[0].lease, b);
    EXPECT_EQ(r.next_due(), t0 + 15s) << "b is out for renewal until scheduled again";
    EXPECT_EQ(r.size(), 3u);
}

TEST_F(LeaseRegistry, SlackBatchesLeasesDueCloseTogether) {
    lease_registry r;
    auto a = make(t0 + 30s), b = make(t0 + 30s);  // lease 30 s: every 10 s, slack 1.25 s
    r.track(a, t0 + 10s);
    r.track(b, t0 + 11s);
    const auto batch = r.due(t0 + 10s);
    EXPECT_EQ(batch.renew.size(), 2u);
}

TEST_F(LeaseRegistry, TrackReportsWhenItBecomesTheEarliest) {
    lease_registry r;
    auto a = make(t0 + 30s), b = make(t0 + 30s), c = make(t0 + 30s);
    EXPECT_TRUE(r.track(a, t0 + 10s));
    EXPECT_FALSE(r.track(b, t0 + 20s)) << "no need to wake the thread";
    EXPECT_TRUE(r.track(c, t0 + 5s));
}

TEST_F(LeaseRegistry, DueTimeIsClampedToTheDeadlineAndExpiredLeasesAreLost) {
    lease_registry r;
    auto a = make(t0 + 5s);
    r.track(a, steady::time_point::max());  // no renewal: it runs out
    EXPECT_EQ(r.next_due(), t0 + 5s);
    EXPECT_EQ(r.earliest_deadline(), t0 + 5s);
    const auto batch = r.due(t0 + 5s);
    EXPECT_TRUE(batch.renew.empty());
    ASSERT_EQ(batch.lost.size(), 1u);
    EXPECT_EQ(batch.lost[0], a);
    EXPECT_FALSE(r.tracked(a.get()));
    EXPECT_EQ(r.next_due(), steady::time_point::max());
}

TEST_F(LeaseRegistry, ScheduleAfterRenewal) {
    lease_registry r;
    auto a = make(t0 + 30s);
    r.track(a, t0 + 10s, /*extend_once=*/true);
    auto batch = r.due(t0 + 10s);
    ASSERT_EQ(batch.renew.size(), 1u);
    EXPECT_TRUE(batch.renew[0].extend_once);
    EXPECT_EQ(r.earliest_deadline(), t0 + 30s) << "out for renewal, its deadline still counts";
    a->renewed(t0 + 40s);
    EXPECT_TRUE(r.schedule(a.get(), t0 + 20s, /*renewed=*/true));
    EXPECT_EQ(r.earliest_deadline(), t0 + 40s);
    batch = r.due(t0 + 20s);
    ASSERT_EQ(batch.renew.size(), 1u);
    EXPECT_FALSE(batch.renew[0].extend_once) << "cleared by the renewal";
}

TEST_F(LeaseRegistry, UntrackedAndReleasedLeasesAreNeverDue) {
    lease_registry r;
    auto a = make(t0 + 30s), b = make(t0 + 30s);
    r.track(a, t0 + 10s);
    r.track(b, t0 + 10s);
    EXPECT_TRUE(r.untrack(a.get()));
    EXPECT_FALSE(r.untrack(a.get()));
    b->mark_released();
    const auto batch = r.due(t0 + 10s);
    EXPECT_TRUE(batch.renew.empty());
    EXPECT_TRUE(batch.lost.empty());
    EXPECT_EQ(r.size(), 0u);
    EXPECT_FALSE(r.schedule(a.get(), t0 + 20s)) << "released during its renewal";
}

TEST_F(LeaseRegistry, DestroyedLeasesAreDropped) {
    lease_registry r;
    {
        auto a = make(t0 + 30s);
        r.track(a, t0 + 10s);
    }
    EXPECT_TRUE(r.due(t0 + 10s).renew.empty());
    EXPECT_EQ(r.size(), 0u);
}

TEST_F(LeaseRegistry, LoseAllReturnsTheLiveOnes) {
    lease_registry r;
    auto a = make(t0 + 30s), b = make(t0 + 30s);
    r.track(a, t0 + 10s);
    r.track(b, t0 + 10s);
    b->mark_released();
    const auto left = r.lose_all();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0], a);
    EXPECT_EQ(r.size(), 0u);
    EXPECT_EQ(r.heap_slots(), 0u);
}

TEST_F(LeaseRegistry, ChurnDoesNotGrowTheHeaps) {
    lease_registry r;
    auto keep = make(t0 + 1h);
    r.track(keep, t0 + 1h);
    for (int i = 0; i < 10'000; ++i) {
        auto l = make(t0 + 30s);
        r.track(l, t0 + 10s);
        r.schedule(l.get(), t0 + 20s);
        r.untrack(l.get());
    }
    EXPECT_EQ(r.size(), 1u);
    EXPECT_LE(r.heap_slots(), 100u) << "stale slots are compacted away";
    EXPECT_EQ(r.next_due(), t0 + 1h);
}

TEST_F(LeaseRegistry, AnUntrackedLeasesSlotsNeverApplyToTheNextOne) {
    // Entries are reused after untrack: the old entry's heap slots must not make the lease that
    // takes its place due early or count its old, earlier deadline.
    lease_registry r;
    auto keep = make(t0 + 1h);
    r.track(keep, t0 + 50s);
    auto a = make(t0 + 10s);
    r.track(a, t0 + 5s);
    EXPECT_TRUE(r.tracked(a.get()));
    EXPECT_TRUE(r.untrack(a.get()));
    EXPECT_FALSE(r.tracked(a.get())) << "no answer remembered from before the untrack";
    auto b = make(t0 + 40s);
    r.track(b, t0 + 30s);
    EXPECT_EQ(r.next_due(), t0 + 30s);
    EXPECT_EQ(r.earliest_deadline(), t0 + 40s);
    auto batch = r.due(t0 + 10s);
    EXPECT_TRUE(batch.renew.empty());
    EXPECT_TRUE(batch.lost.empty());
    batch = r.due(t0 + 30s);
    ASSERT_EQ(batch.renew.size(), 1u);
    EXPECT_EQ(batch.renew[0].lease, b);
    EXPECT_FALSE(r.tracked(a.get()));
    EXPECT_TRUE(r.tracked(b.get()));
    EXPECT_TRUE(r.tracked(keep.get()));
    EXPECT_EQ(r.size(), 2u);
}

TEST_F(LeaseRegistry, ManyLeasesOnlyTheDueOnesAreTouched) {
    lease_registry r;
    std::vector<std::shared_ptr<lease_core>> leases;
    for (int i = 0; i < 10'000; ++i) {
        leases.push_back(make(t0 + 1h, 30s));
        r.track(leases.back(), t0 + 10s + std::chrono::milliseconds(i));
    }
    // 10 s + [0, 10 s): with 1.25 s slack, at 10 s the first 1250 ms worth are due.
    const auto batch = r.due(t0 + 10s);
    EXPECT_EQ(batch.renew.size(), 1251u);
    for (const auto& d : batch.renew) r.schedule(d.lease.get(), t0 + 20s);
    EXPECT_EQ(r.next_due(), t0 + 10s + 1251ms);
}

// ---- quorum --------------------------------------------------------------------------------

namespace q = dlock::detail::quorum;
using vote = q::acquire_vote;

vote granted(std::int64_t counter) { return {vote::kind::granted, counter, -1, 0}; }
vote held(std::int64_t ms, std::uint64_t ticket = 0) { return {vote::kind::held, 0, ms, ticket}; }
vote failed() { return {}; }

TEST(Quorum, Majority) {
    EXPECT_EQ(q::majority(1), 1u);
    EXPECT_EQ(q::majority(2), 2u);
    EXPECT_EQ(q::majority(3), 2u);
    EXPECT_EQ(q::majority(5), 3u);
}

TEST(Quorum, AcquireGrantedByAMajorityWithAgreedFence) {
    const std::vector<vote> v{granted(7), granted(7), failed()};
    const auto t = q::tally_acquire(v);
    EXPECT_EQ(t.granting, 2u);
    EXPECT_EQ(t.failed, 1u);
    EXPECT_EQ(t.fence, 7);
    EXPECT_TRUE(t.fence_agreed());
    EXPECT_EQ(q::decide_acquire(t, 0, t0, t0 + 1s), q::acquire_verdict::granted);
}

TEST(Quorum, AcquireTooLateIsNotAGrant) {
    const std::vector<vote> v{granted(1), granted(1), granted(1)};
    const auto t = q::tally_acquire(v);
    const auto validity = q::grant_validity(t0, 100ms, {});
    EXPECT_EQ(validity, t0 + 100ms - 3ms);  // drift 100/100 + 2 ms
    EXPECT_EQ(q::decide_acquire(t, 0, validity - 1ns, validity), q::acquire_verdict::granted);
    EXPECT_EQ(q::decide_acquire(t, 0, validity, validity), q::acquire_verdict::contended);
}

TEST(Quorum, AcquireFenceWriteBack) {
    const std::vector<vote> v{granted(9), granted(4), granted(5), held(100), failed()};
    const auto t = q::tally_acquire(v);
    EXPECT_EQ(t.fence, 9);
    EXPECT_EQ(t.at_fence, 1u);
    EXPECT_EQ(t.behind, (std::vector<std::size_t>{1, 2, 3, 4})) << "every server not at the fence";
    EXPECT_TRUE(t.majority_granted());
    EXPECT_FALSE(t.fence_agreed(1));
    EXPECT_EQ(q::decide_acquire(t, 1, t0, t0 + 1s), q::acquire_verdict::contended);
    EXPECT_EQ(q::decide_acquire(t, 2, t0, t0 + 1s), q::acquire_verdict::granted);
    EXPECT_EQ(t.lagging, (std::vector<std::size_t>{1, 2})) << "the granting servers below it";
}

TEST(Quorum, AgreedFenceStillRaisesLaggingServers) {
    // A server restarted empty grants with a counter of 1; the other two agree on 11. The grant
    // needs no write-back, but the lagging server is raised, or its restarted neighbour would
    // leave 11 on one server only.
    const std::vector<vote> v{granted(1), granted(11), granted(11)};
    const auto t = q::tally_acquire(v);
    EXPECT_TRUE(t.fence_agreed());
    EXPECT_EQ(t.fence, 11);
    EXPECT_EQ(t.lagging, (std::vector<std::size_t>{0}));
    const std::vector<vote> held_elsewhere{granted(11), granted(11), held(100)};
    EXPECT_TRUE(q::tally_acquire(held_elsewhere).lagging.empty())
        << "only granting servers lag; the others are raised only when the fence is not agreed";
}

TEST(Quorum, AcquireContendedAndUnreachable) {
    const std::vector<vote> split{granted(1), held(50), held(20, 4)};
    const auto t = q::tally_acquire(split);
    EXPECT_EQ(t.holder_ms, 20);
    EXPECT_EQ(t.ticket, 4u);
    EXPECT_EQ(q::decide_acquire(t, 0, t0, t0 + 1s), q::acquire_verdict::contended);

    const std::vector<vote> down{granted(1), failed(), failed()};
    EXPECT_EQ(q::decide_acquire(q::tally_acquire(down), 0, t0, t0 + 1s),
              q::acquire_verdict::unreachable);
    const std::vector<vote> unknown_ttl{held(-1)};
    EXPECT_EQ(q::tally_acquire(unknown_ttl).holder_ms, -1);
}

TEST(Quorum, SingleServer) {
    const std::vector<vote> one{granted(3)};
    EXPECT_EQ(q::decide_acquire(q::tally_acquire(one), 0, t0, t0 + 1s),
              q::acquire_verdict::granted);
    const std::vector<vote> none{failed()};
    EXPECT_EQ(q::decide_acquire(q::tally_acquire(none), 0, t0, t0 + 1s),
              q::acquire_verdict::unreachable);
    using ov = q::owner_vote;
    const std::vector<ov> gone{ov::not_ours};
    EXPECT_EQ(q::decide_renew(q::tally_owner(gone, 1)), q::renew_verdict::lost);
    EXPECT_EQ(q::decide_release(q::tally_owner(gone, 1)), q::release_verdict::lost);
    const std::vector<ov> down{ov::failed};
    EXPECT_EQ(q::decide_renew(q::tally_owner(down, 1)), q::renew_verdict::failed);
    EXPECT_EQ(q::decide_release(q::tally_owner(down, 1)), q::release_verdict::failed);
}

TEST(Quorum, Renew) {
    using ov = q::owner_vote;
    const std::vector<ov> ok{ov::ours, ov::ours, ov::failed};
    EXPECT_EQ(q::decide_renew(q::tally_owner(ok, 3)), q::renew_verdict::renewed);
    const std::vector<ov> gone{ov::ours, ov::not_ours, ov::not_ours};
    EXPECT_EQ(q::decide_renew(q::tally_owner(gone, 3)), q::renew_verdict::lost);
    const std::vector<ov> undecided{ov::ours, ov::not_ours, ov::failed};
    EXPECT_EQ(q::decide_renew(q::tally_owner(undecided, 3)), q::renew_verdict::failed);
    // Servers whose votes do not count are left out of the votes but not of N.
    const std::vector<ov> uncounted{ov::ours};
    EXPECT_EQ(q::decide_renew(q::tally_owner(uncounted, 3)), q::renew_verdict::failed);
}

TEST(Quorum, Release) {
    using ov = q::owner_vote;
    const std::vector<ov> ok{ov::ours, ov::failed, ov::not_ours};
    EXPECT_EQ(q::decide_release(q::tally_owner(ok, 3)), q::release_verdict::released)
        << "unreachable servers keep our key until it expires; nobody else is hurt";
    const std::vector<ov> was_lost{ov::ours, ov::not_ours, ov::not_ours};
    EXPECT_EQ(q::decide_release(q::tally_owner(was_lost, 3)), q::release_verdict::lost)
        << "one server deleted it, but no quorum held it any more";
    const std::vector<ov> down{ov::failed, ov::failed, ov::not_ours};
    EXPECT_EQ(q::decide_release(q::tally_owner(down, 3)), q::release_verdict::failed);
}

// A server holding another owner's token votes "taken": it counts as not ours in every verdict,
// and the tally keeps how many so the engine can report taken_over rather than deleted.
TEST(Quorum, TakenCountsAsNotOurs) {
    using ov = q::owner_vote;
    EXPECT_EQ(q::owner_vote_of(1), ov::ours);
    EXPECT_EQ(q::owner_vote_of(0), ov::not_ours);
    EXPECT_EQ(q::owner_vote_of(-1), ov::taken);
    const std::vector<ov> taken{ov::ours, ov::taken, ov::not_ours};
    const auto t = q::tally_owner(taken, 3);
    EXPECT_EQ(t.ours, 1u);
    EXPECT_EQ(t.not_ours, 2u);
    EXPECT_EQ(t.taken, 1u);
    EXPECT_EQ(q::decide_renew(t), q::renew_verdict::lost);
    EXPECT_EQ(q::decide_release(t), q::release_verdict::lost);
    const std::vector<ov> one_taken{ov::ours, ov::ours, ov::taken};
    EXPECT_EQ(q::decide_renew(q::tally_owner(one_taken, 3)), q::renew_verdict::renewed);
    EXPECT_EQ(q::decide_release(q::tally_owner(one_taken, 3)), q::release_verdict::released);
    const std::vector<ov> gone{ov::not_ours};
    EXPECT_EQ(q::tally_owner(gone, 1).taken, 0u);
}

}  // namespace

// ---- composite_grant --------------------------------------------------------------------------

namespace {

using dlock::lock_state;
using dlock::detail::composite_grant;
using dlock::detail::lease_access;

struct parts {
    std::shared_ptr<dlock_test::fake_owner> owner = std::make_shared<dlock_test::fake_owner>();
    std::vector<std::shared_ptr<lease_core>> cores;
    dlock::lease make(std::string name, std::chrono::milliseconds left = 1h) {
        const auto now = steady::now();
        cores.push_back(std::make_shared<lease_core>(owner, std::move(name), "tok",
                                                     cores.size() + 1, dlock::lock_options{}, now,
                                                     now + left));
        return lease_access::make(cores.back());
    }
};

TEST(CompositeGrant, Severity) {
    EXPECT_LT(dlock::detail::severity(lock_state::held),
              dlock::detail::severity(lock_state::uncertain));
    EXPECT_LT(dlock::detail::severity(lock_state::uncertain),
              dlock::detail::severity(lock_state::lost));
    EXPECT_EQ(dlock::detail::worse(lock_state::held, lock_state::uncertain), lock_state::uncertain);
    EXPECT_EQ(dlock::detail::worse(lock_state::lost, lock_state::uncertain), lock_state::lost);
}

TEST(CompositeGrant, EmptySetReportsNothingHeld) {
    composite_grant g;
    EXPECT_EQ(g.state(), lock_state::lost);
    EXPECT_EQ(g.expires_in(), 0ms);
    EXPECT_TRUE(g.lost_token().stop_requested());
}

TEST(CompositeGrant, ShortestExpiryAndWorstState) {
    parts p;
    composite_grant g;
    g.add(p.make("a", 1h));
    g.add(p.make("b", 10min));
    EXPECT_LE(g.expires_in(), 10min);
    EXPECT_GT(g.expires_in(), 9min);
    EXPECT_EQ(g.state(), lock_state::held);
    p.cores[0]->renewal_failed();
    EXPECT_EQ(g.state(), lock_state::uncertain);
}

TEST(CompositeGrant, ALostPartFiresTheSet) {
    parts p;
    composite_grant g;
    g.add(p.make("a"));
    g.add(p.make("b"));
    const auto token = g.lost_token();
    EXPECT_FALSE(token.stop_requested());
    p.cores[1]->lose(dlock::make_error_code(errc::lock_lost));
    EXPECT_TRUE(token.stop_requested());
    EXPECT_EQ(g.state(), lock_state::lost);
}

TEST(CompositeGrant, APartLostBeforeItIsAddedFiresTheSetAtOnce) {
    parts p;
    composite_grant g;
    auto l = p.make("a");
    p.cores[0]->lose(dlock::make_error_code(errc::lock_lost));
    g.add(std::move(l));
    EXPECT_TRUE(g.lost_token().stop_requested());
}

TEST(CompositeGrant, TeardownReleasesNewestFirstWithoutLookingLikeALoss) {
    parts p;
    std::stop_token token;
    bool fired_while_parts_held = false;
    {
        composite_grant g;
        g.add(p.make("first"));
        g.add(p.make("second"));
        g.add(p.make("third"));
        token = g.lost_token();
        // A release fires that lease's own token; the relay must be gone by then.
        std::stop_callback probe(token, [&] { fired_while_parts_held = p.owner->releases < 3; });
    }
    EXPECT_EQ(p.owner->released_names, (std::vector<std::string>{"third", "second", "first"}));
    EXPECT_TRUE(token.stop_requested()) << "the set's token fires once, at the end";
    EXPECT_FALSE(fired_while_parts_held);
}

TEST(CompositeGrant, RemoveTakesOnePartOutWithItsRelay) {
    parts p;
    composite_grant g;
    g.add(p.make("a"));
    g.add(p.make("b"));
    const auto token = g.lost_token();
    {
        auto d = g.remove(0);
        EXPECT_EQ(d.part.fencing_token(), 1u);
        EXPECT_EQ(g.size(), 1u);
        EXPECT_EQ(g.front().fencing_token(), 2u);
    }  // released here, relay first
    EXPECT_EQ(p.owner->released_names, (std::vector<std::string>{"a"}));
    EXPECT_FALSE(token.stop_requested()) << "a deliberate release is not a loss";
    auto last = g.remove_last();
    EXPECT_TRUE(g.empty());
    std::stop_source fresh;
    auto ended = g.finish(fresh);
    EXPECT_FALSE(ended.stop_requested());
    EXPECT_EQ(g.lost_source(), fresh);
}

// record_once's verdict: a value counts only when a majority of ALL servers stores it; it is
// written back where it is missing; a first write needs every answering server empty.
namespace record {
namespace quorum = dlock::detail::quorum;
using kind = quorum::record_step::kind;
quorum::record_read says(const char* stored) { return {true, std::string(stored)}; }
const quorum::record_read empty{true, std::nullopt};
const quorum::record_read down{false, std::nullopt};
}  // namespace record

TEST(QuorumRecord, MajorityOfAllServersDecides) {
    using namespace record;
    using reads = std::vector<quorum::record_read>;
    using to = std::vector<std::size_t>;
    auto step = quorum::decide_record(reads{says("8")}, "9");
    EXPECT_EQ(step.what, kind::agreed);
    EXPECT_EQ(step.value, "8");
    EXPECT_EQ(step.to, to{});
    step = quorum::decide_record(reads{says("8"), says("8"), says("8")}, "9");
    EXPECT_EQ(step.what, kind::agreed);
    EXPECT_EQ(step.to, to{});
    step = quorum::decide_record(reads{says("8"), says("5"), says("8")}, "9");
    EXPECT_EQ(step.what, kind::agreed) << "an outvoted minority";
    EXPECT_EQ(step.value, "8");
    EXPECT_EQ(step.to, to{1}) << "the outvoted value is overwritten";
    step = quorum::decide_record(reads{says("8"), down, says("8")}, "9");
    EXPECT_EQ(step.what, kind::agreed) << "one server did not answer";
    EXPECT_EQ(step.to, to{}) << "nothing is written where nobody answered";
    step = quorum::decide_record(reads{empty, says("8"), says("8")}, "9");
    EXPECT_EQ(step.what, kind::agreed) << "a server restarted empty";
    EXPECT_EQ(step.to, to{0}) << "gets the agreed value back";
    step = quorum::decide_record(reads{says("8"), says("5"), says("6")}, "9");
    EXPECT_EQ(step.what, kind::undecided) << "split three ways";
    step = quorum::decide_record(reads{says("8"), down, down}, "9");
    EXPECT_EQ(step.what, kind::unreachable) << "fewer than a quorum answered";
    // Two servers restarted empty, one after the other, with no call in between: the value
    // survives on one server only. A minority never wins, and the caller's value must not either.
    step = quorum::decide_record(reads{empty, empty, says("8")}, "16");
    EXPECT_EQ(step.what, kind::undecided);
    EXPECT_EQ(step.to, to{}) << "nothing is written";
    step = quorum::decide_record(reads{empty, says("8"), down}, "16");
    EXPECT_EQ(step.what, kind::undecided);
    // First use: every answering server empty (a minority may be down).
    step = quorum::decide_record(reads{empty, empty, empty}, "16");
    EXPECT_EQ(step.what, kind::first_write);
    EXPECT_EQ(step.value, "16");
    EXPECT_EQ(step.to, (to{0, 1, 2}));
    step = quorum::decide_record(reads{empty, down, empty}, "16");
    EXPECT_EQ(step.what, kind::first_write);
    EXPECT_EQ(step.to, (to{0, 2}));
    step = quorum::decide_record(reads{empty, down, down}, "16");
    EXPECT_EQ(step.what, kind::unreachable);
    // Five servers: two of three answers agreeing is not a majority of five.
    step = quorum::decide_record(reads{says("5"), says("5"), says("8"), down, down}, "9");
    EXPECT_EQ(step.what, kind::undecided);
    step = quorum::decide_record(reads{says("5"), says("8"), says("5"), says("5"), down}, "9");
    EXPECT_EQ(step.what, kind::agreed);
    EXPECT_EQ(step.value, "5");
    EXPECT_EQ(step.to, to{1});
    EXPECT_EQ(quorum::decide_record(reads{}, "9").what, kind::unreachable);
}

// --- the engines' shared prologue and error mapping (core/engine_skeleton.hpp) ---

TEST(CheckAcquire, EachRuleHasOneMessage) {
    using dlock::detail::check_acquire;
    using dlock::detail::message_for;
    std::error_code ec;
    dlock::lock_request request;
    EXPECT_TRUE(check_acquire("n", 64, request, {}, ec));
    EXPECT_FALSE(ec);

    EXPECT_FALSE(check_acquire("", 64, request, {}, ec));
    EXPECT_EQ(ec, errc::invalid_argument);

    request.kind = dlock::lock_kind::permits;
    request.count = 0;
    EXPECT_FALSE(check_acquire("n", 64, request, {}, ec));
    EXPECT_EQ(ec, errc::invalid_argument);
    EXPECT_EQ(message_for(ec),
              "semaphore \"n\": lock_request.count (0) must be >= 1 and <= limit (1)");

    const dlock::lease held;
    request = {};
    request.reenter = &held;
    EXPECT_FALSE(check_acquire("n", 64, request, {}, ec));
    EXPECT_EQ(message_for(ec), "lock_request.reenter is only for the reentrant kind");
    request.kind = dlock::lock_kind::reentrant;
    EXPECT_TRUE(check_acquire("n", 64, request, {}, ec));
}

TEST(Guarded, WhatEscapesAnEntryPointBecomesItsErrorCode) {
    using dlock::detail::guarded;
    std::error_code ec;
    EXPECT_EQ(guarded(ec, [] { return 7; }), 7);
    EXPECT_FALSE(ec);
    EXPECT_EQ(guarded(ec, []() -> int { throw std::bad_alloc(); }), 0);
    EXPECT_EQ(ec, std::errc::not_enough_memory);
    EXPECT_EQ(guarded(ec, []() -> int { throw dlock::error(errc::timeout, "late"); }), 0);
    EXPECT_EQ(ec, errc::timeout);
    EXPECT_EQ(guarded(ec, []() -> std::string { throw std::runtime_error("odd"); }), "");
    EXPECT_EQ(ec, errc::protocol_error);
    EXPECT_EQ(dlock::detail::message_for(ec), "odd");
}

}  // namespace
