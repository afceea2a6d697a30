// validate_lock_name / validate_lock_options: each rejection is errc::invalid_argument with a
// message naming the field and the value; valid input clears ec.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <system_error>

#include <dlock/error.hpp>
#include <dlock/options.hpp>

#include "core/status.hpp"
#include "core/validate.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::detail::validate_lock_name;
using dlock::detail::validate_lock_options;

std::error_code stale() { return make_error_code(dlock::errc::timeout); }

// Validates `o`, expects invalid_argument, returns the message.
std::string options_error(const dlock::lock_options& o) {
    std::error_code ec;
    validate_lock_options(o, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    return dlock::detail::message_for(ec);
}

void expect_has(const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "\"" << message << "\" lacks \"" << part << "\"";
}

TEST(ValidateLockName, AcceptsNamesUpToTheLimit) {
    std::error_code ec = stale();
    validate_lock_name("a", 8, ec);
    EXPECT_FALSE(ec);
    ec = stale();
    validate_lock_name("12345678", 8, ec);
    EXPECT_FALSE(ec);
    ec = stale();
    validate_lock_name(std::string("bin\0ary", 7), 8, ec);
    EXPECT_FALSE(ec);
}

TEST(ValidateLockName, RejectsEmpty) {
    std::error_code ec;
    validate_lock_name("", 8, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    expect_has(dlock::detail::message_for(ec), "empty");
    expect_has(dlock::detail::message_for(ec), "lock name");
}

TEST(ValidateLockName, RejectsOverLimitNamingBothSizes) {
    std::error_code ec;
    validate_lock_name(std::string(513, 'x'), 512, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    const auto m = dlock::detail::message_for(ec);
    expect_has(m, "lock name");
    expect_has(m, "513");
    expect_has(m, "512");
}

TEST(ValidateLockOptions, DefaultsAreValid) {
    std::error_code ec = stale();
    validate_lock_options({}, ec);
    EXPECT_FALSE(ec) << dlock::detail::message_for(ec);
}

TEST(ValidateLockOptions, BoundaryValuesAreValid) {
    for (const auto& o : {
             dlock::lock_options{.lease = dlock::min_lease},
             dlock::lock_options{.lease = dlock::max_lease},
             dlock::lock_options{.lease = 3s, .renew_every = 1ms},
             dlock::lock_options{.lease = 3s, .renew_every = 2967ms},  // just inside lease - drift
             dlock::lock_options{.max_hold = 1ms},
             dlock::lock_options{.max_attempts = 1u},
             dlock::lock_options{.wait = -5s},  // negative wait counts as 0, not an error
             dlock::lock_options{.wait = 0ms, .renew = false},
         }) {
        std::error_code ec = stale();
        validate_lock_options(o, ec);
        EXPECT_FALSE(ec) << dlock::detail::message_for(ec);
    }
}

TEST(ValidateLockOptions, LeaseMustBePositive) {
    for (const std::chrono::milliseconds lease : {0ms, -1ms, -30000ms}) {
        const auto m = options_error({.lease = lease});
        expect_has(m, "lock_options.lease");
        expect_has(m, std::to_string(lease.count()) + "ms");
    }
}

TEST(ValidateLockOptions, LeaseOverMaxLease) {
    const auto m = options_error({.lease = dlock::max_lease + 1ms});
    expect_has(m, "lock_options.lease");
    expect_has(m, std::to_string((dlock::max_lease + 1ms).count()) + "ms");
    expect_has(m, std::to_string(dlock::max_lease.count()) + "ms");
    options_error({.lease = dlock::forever});
}

TEST(ValidateLockOptions, RenewEveryMustBeInsideLease) {
    for (const std::chrono::milliseconds every : {0ms, -1ms, 10000ms, 11000ms}) {
        const auto m = options_error({.lease = 10s, .renew_every = every});
        expect_has(m, "lock_options.renew_every");
        expect_has(m, std::to_string(every.count()) + "ms");
        expect_has(m, "10000ms");
    }
}

TEST(ValidateLockOptions, MaxHoldMustBePositive) {
    for (const auto hold : {0ms, -1ms}) {
        const auto m = options_error({.max_hold = hold});
        expect_has(m, "lock_options.max_hold");
    }
}

TEST(ValidateLockOptions, MaxAttemptsZero) {
    const auto m = options_error({.max_attempts = 0u});
    expect_has(m, "lock_options.max_attempts");
}

TEST(ValidateLockOptions, ErrorClearedOnNextValidCall) {
    std::error_code ec;
    validate_lock_options({.lease = 0ms}, ec);
    ASSERT_TRUE(ec);
    validate_lock_options({}, ec);
    EXPECT_FALSE(ec);
}

}  // namespace
