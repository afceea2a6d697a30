// dlock::mutex over an in-memory backend: deadline conversion (past, negative, forever, other
// clocks), contention vs failure, and use through std::unique_lock / std::scoped_lock / std::lock.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <system_error>

#include <dlock/error.hpp>
#include <dlock/mutex.hpp>

#include "fakes.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::errc;
using dlock::lock_state;
using dlock_test::fake_backend;
using steady = std::chrono::steady_clock;

// Runs `call`, then checks the deadline it handed the backend lies in [before + lo, after + hi].
template <class Call>
void expect_deadline(fake_backend& b, Call call, steady::duration lo, steady::duration hi) {
    const auto before = steady::now();
    call();
    const auto after = steady::now();
    ASSERT_FALSE(b.deadlines.empty());
    const auto d = b.deadlines.back();
    EXPECT_GE(d, before + lo) << "deadline early by " << (before + lo - d).count() << "ns";
    EXPECT_LE(d, after + hi) << "deadline late by " << (d - (after + hi)).count() << "ns";
}

TEST(Mutex, ConstructorValidatesOptions) {
    fake_backend b;
    try {
        dlock::mutex m(b, "a", {.lease = 0ms});
        FAIL() << "accepted lease 0";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("lock_options.lease"), std::string::npos) << e.what();
    }
    EXPECT_THROW(dlock::mutex(b, "a", {.max_attempts = 0u}), dlock::error);
    EXPECT_EQ(b.attempts, 0);  // contacts no server
}

// An empty name is invalid on every backend, so the constructor rejects it before any lock().
TEST(Mutex, ConstructorRejectsEmptyName) {
    fake_backend b;
    try {
        dlock::mutex m(b, "");
        FAIL() << "accepted an empty name";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
    }
    EXPECT_EQ(b.attempts, 0);
}

TEST(Mutex, LockHoldsUntilUnlock) {
    fake_backend b;
    dlock::mutex m(b, "stock/sku-42");
    EXPECT_EQ(m.name(), "stock/sku-42");
    EXPECT_EQ(m.state(), lock_state::lost);
    EXPECT_EQ(m.expires_in(), 0ms);
    EXPECT_TRUE(m.lost_token().stop_requested());
    EXPECT_THROW((void)m.fencing_token(), dlock::error);

    m.lock();
    ASSERT_EQ(b.deadlines.size(), 1u);
    EXPECT_EQ(b.deadlines[0], steady::time_point::max());  // lock() has no bound
    EXPECT_EQ(m.fencing_token(), 1u);
    EXPECT_EQ(m.state(), lock_state::held);
    EXPECT_GT(m.expires_in(), 0ms);
    const auto token = m.lost_token();
    EXPECT_FALSE(token.stop_requested());

    m.unlock();
    EXPECT_EQ(b.owner->releases, 1);
    EXPECT_TRUE(token.stop_requested());
    EXPECT_EQ(m.state(), lock_state::lost);
    try {
        (void)m.fencing_token();
        FAIL() << "fencing_token() after unlock";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::not_owner);
        EXPECT_NE(std::string(e.what()).find("stock/sku-42"), std::string::npos) << e.what();
    }
}

TEST(Mutex, UnlockWhenNotHeldIsHarmless) {
    fake_backend b;
    dlock::mutex m(b, "a");
    m.unlock();
    m.unlock();
    EXPECT_EQ(b.owner->releases, 0);
    EXPECT_TRUE(b.owner->reported.empty());
}

TEST(Mutex, UnlockNeverThrowsOnFailedRelease) {
    fake_backend b;
    dlock::mutex m(b, "a");
    m.lock();
    b.owner->release_result = errc::connection_failed;
    static_assert(noexcept(m.unlock()));
    m.unlock();
    ASSERT_EQ(b.owner->reported.size(), 1u);
    EXPECT_EQ(b.owner->reported[0].code, errc::connection_failed);
    EXPECT_EQ(m.state(), lock_state::lost);
}

TEST(Mutex, DestructorReleases) {
    fake_backend b;
    {
        dlock::mutex m(b, "a");
        m.lock();
    }
    EXPECT_EQ(b.owner->releases, 1);
    EXPECT_TRUE(b.owner->held.empty());
}

TEST(Mutex, TryLockIsOneAttemptWithAPastDeadline) {
    fake_backend b;
    dlock::mutex m(b, "a");
    const auto before = steady::now();
    EXPECT_TRUE(m.try_lock());
    ASSERT_EQ(b.attempts, 1);
    EXPECT_LE(b.deadlines[0], before);
}

TEST(Mutex, TryLockFalseUnderContention) {
    fake_backend b;
    dlock::mutex holder(b, "a");
    dlock::mutex other(b, "a");
    holder.lock();
    EXPECT_FALSE(other.try_lock());
    EXPECT_FALSE(other.try_lock_for(10ms));
    EXPECT_EQ(other.state(), lock_state::lost);
    holder.unlock();
    EXPECT_TRUE(other.try_lock());
    EXPECT_EQ(other.fencing_token(), 2u);  // a later grant has a larger token
}

TEST(Mutex, AttemptsExhaustedIsContentionForTryLockButThrowsFromLock) {
    fake_backend b;
    dlock::mutex m(b, "a");
    b.fail_with = errc::attempts_exhausted;
    EXPECT_FALSE(m.try_lock_for(1s));
    b.fail_with = errc::attempts_exhausted;
    try {
        m.lock();
        FAIL() << "lock() returned without the lock";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::attempts_exhausted);
    }
    EXPECT_EQ(m.state(), lock_state::lost);
}

TEST(Mutex, BackendFailureThrowsFromEveryLockCall) {
    fake_backend b;
    dlock::mutex m(b, "a");
    for (int which = 0; which < 4; ++which) {
        b.fail_with = errc::connection_failed;
        try {
            switch (which) {
                case 0: m.lock(); break;
                case 1: (void)m.try_lock(); break;
                case 2: (void)m.try_lock_for(1s); break;
                case 3: (void)m.try_lock_until(steady::now() + 1s); break;
            }
            FAIL() << "call " << which << " did not throw";
        } catch (const dlock::error& e) {
            EXPECT_EQ(e.code(), errc::connection_failed) << which;
            EXPECT_NE(std::string(e.what()).find("fake backend failure"), std::string::npos)
                << e.what();
        }
        EXPECT_EQ(m.state(), lock_state::lost) << which;
    }
    EXPECT_TRUE(b.owner->held.empty());
}

// ---- try_lock_for / try_lock_until deadline conversion ---------------------------------------

TEST(MutexDeadline, TryLockForOrdinaryDuration) {
    fake_backend b;
    dlock::mutex m(b, "a");
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_for(250ms)); }, 250ms, 250ms);
    m.unlock();
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_for(std::chrono::duration<double>(0.5))); }, 499ms, 501ms);
    m.unlock();
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_for(2min)); }, 2min, 2min);
}

TEST(MutexDeadline, ZeroAndNegativeTimeoutMeanNow) {
    fake_backend b;
    dlock::mutex m(b, "a");
    for (const std::chrono::milliseconds timeout : {0ms, -1ms, -3600000ms}) {
        expect_deadline(
            b, [&] { EXPECT_TRUE(m.try_lock_for(timeout)); }, 0ns, 0ns);
        m.unlock();
    }
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_for(std::chrono::nanoseconds::min())); }, 0ns, 0ns);
    m.unlock();
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_for(std::chrono::hours::min())); }, 0ns, 0ns);
}

TEST(MutexDeadline, HugeTimeoutsSaturate) {
    fake_backend b;
    dlock::mutex m(b, "a");
    EXPECT_TRUE(m.try_lock_for(dlock::forever));
    EXPECT_EQ(b.deadlines.back(), steady::time_point::max());
    m.unlock();
    EXPECT_TRUE(m.try_lock_for(std::chrono::hours::max()));
    EXPECT_EQ(b.deadlines.back(), steady::time_point::max());
    m.unlock();
    EXPECT_TRUE(m.try_lock_for(std::chrono::nanoseconds::max()));
    EXPECT_EQ(b.deadlines.back(), steady::time_point::max());
    m.unlock();
    EXPECT_TRUE(m.try_lock_for(std::chrono::duration<double>(1e300)));
    EXPECT_EQ(b.deadlines.back(), steady::time_point::max());
}

TEST(MutexDeadline, TryLockUntilSteadyPassesThrough) {
    fake_backend b;
    dlock::mutex m(b, "a");
    const auto at = steady::now() + 3s;
    EXPECT_TRUE(m.try_lock_until(at));
    EXPECT_EQ(b.deadlines.back(), at);
    m.unlock();
    const auto past = steady::now() - 1h;
    EXPECT_TRUE(m.try_lock_until(past));  // a past deadline is one attempt
    EXPECT_EQ(b.deadlines.back(), past);
    m.unlock();
    const auto coarse = std::chrono::time_point_cast<std::chrono::milliseconds>(steady::now() + 1s);
    EXPECT_TRUE(m.try_lock_until(coarse));
    EXPECT_EQ(b.deadlines.back(), coarse);
}

TEST(MutexDeadline, TryLockUntilOtherClockConvertsOnce) {
    fake_backend b;
    dlock::mutex m(b, "a");
    using sys = std::chrono::system_clock;
    // Conversion may lose the time between the two clocks' now() calls: allow 100ms of slack.
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_until(sys::now() + 1h)); }, 1h - 100ms, 1h);
    m.unlock();
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_until(sys::now() - 1h)); }, 0ns, 0ns);
    m.unlock();
    // The far end of another clock converts without overflow to a steady deadline centuries away.
    const auto before = steady::now();
    EXPECT_TRUE(m.try_lock_until(sys::time_point::max()));
    EXPECT_GE(b.deadlines.back(), before + std::chrono::hours(24 * 365 * 100));
}

// "A past deadline means one attempt" (dlock/backend.hpp) must hold for the most distant past too:
// `deadline - Clock::now()` would be a signed overflow for time_point::min() (UBSan).
TEST(MutexDeadline, TryLockUntilInfinitePastOnOtherClockIsOneAttempt) {
    fake_backend b;
    dlock::mutex m(b, "a");
    expect_deadline(
        b, [&] { EXPECT_TRUE(m.try_lock_until(std::chrono::system_clock::time_point::min())); },
        0ns, 0ns);
}

// The far future in a coarse unit must stay far future: converting seconds::max() to nanoseconds
// would overflow (UBSan) and turn "wait forever" into one attempt.
TEST(MutexDeadline, TryLockUntilCoarseFarFutureDoesNotOverflow) {
    using namespace std::chrono;
    fake_backend b;
    dlock::mutex m(b, "a");
    const auto before = steady::now();
    EXPECT_TRUE(m.try_lock_until(time_point<system_clock, seconds>::max()));
    EXPECT_GE(b.deadlines.back(), before + hours(24 * 365 * 100));
    m.unlock();
    EXPECT_TRUE(m.try_lock_until(time_point<steady_clock, seconds>::max()));
    EXPECT_GE(b.deadlines.back(), before + hours(24 * 365 * 100));
}

// ---- std lock utilities ---------------------------------------------------------------------

TEST(MutexStd, UniqueLock) {
    fake_backend b;
    dlock::mutex m(b, "a");
    {
        std::unique_lock lk(m);
        EXPECT_TRUE(lk.owns_lock());
        EXPECT_EQ(m.fencing_token(), 1u);
        lk.unlock();
        EXPECT_EQ(b.owner->releases, 1);
        EXPECT_TRUE(lk.try_lock_for(1s));
        EXPECT_EQ(m.fencing_token(), 2u);
    }
    EXPECT_EQ(b.owner->releases, 2);
    EXPECT_THROW((void)m.fencing_token(), dlock::error);
}

TEST(MutexStd, UniqueLockTryToLockUnderContention) {
    fake_backend b;
    dlock::mutex holder(b, "a");
    dlock::mutex other(b, "a");
    std::unique_lock held(holder);
    std::unique_lock lk(other, std::try_to_lock);
    EXPECT_FALSE(lk.owns_lock());
    std::unique_lock timed(other, 5ms);
    EXPECT_FALSE(timed.owns_lock());
}

TEST(MutexStd, ScopedLockAndStdLock) {
    fake_backend b;
    dlock::mutex m1(b, "one");
    dlock::mutex m2(b, "two");
    {
        std::scoped_lock lk(m1, m2);
        EXPECT_EQ(m1.state(), lock_state::held);
        EXPECT_EQ(m2.state(), lock_state::held);
        EXPECT_EQ(b.owner->held.size(), 2u);
    }
    EXPECT_TRUE(b.owner->held.empty());
    std::lock(m1, m2);
    EXPECT_EQ(b.owner->held.size(), 2u);
    m1.unlock();
    m2.unlock();
    EXPECT_TRUE(b.owner->held.empty());
}

}  // namespace
