// The error vocabulary: dlock::errc, its category, is_contention, dlock::error, and the
// thread-local message slot in core/status.hpp.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>

#include <dlock/error.hpp>

#include "core/status.hpp"

namespace {

using dlock::errc;

constexpr errc all_codes[] = {
    errc::invalid_argument,   errc::timeout,           errc::attempts_exhausted, errc::lock_lost,
    errc::not_owner,          errc::connection_failed, errc::server_timeout,     errc::auth_failed,
    errc::protocol_error,     errc::unexpected_reply,  errc::server_error,       errc::unsupported,
    errc::quorum_unreachable, errc::canceled,
};

static_assert(std::is_error_code_enum_v<errc>);
static_assert(std::is_base_of_v<std::system_error, dlock::error>);
static_assert(!std::is_convertible_v<errc, int>);  // enum class: no silent int conversion

TEST(ErrorCategory, NameIsDlock) {
    EXPECT_STREQ(dlock::category().name(), "dlock");
    EXPECT_EQ(&dlock::category(), &dlock::category());  // a singleton: codes compare by address
}

TEST(ErrorCategory, EveryCodeHasADistinctMessage) {
    const std::string unknown = dlock::category().message(0);
    std::set<std::string> messages;
    for (const auto e : all_codes) {
        const auto m = dlock::make_error_code(e).message();
        EXPECT_FALSE(m.empty()) << static_cast<int>(e);
        EXPECT_NE(m, unknown) << static_cast<int>(e);
        EXPECT_TRUE(messages.insert(m).second) << "duplicate message: " << m;
    }
    EXPECT_EQ(messages.size(), std::size(all_codes));
}

TEST(ErrorCategory, CodesAreNonZero) {
    for (const auto e : all_codes) {
        const std::error_code ec = e;
        EXPECT_TRUE(static_cast<bool>(ec)) << static_cast<int>(e);
        EXPECT_NE(ec.value(), 0);
    }
}

TEST(ErrorCode, ImplicitConversionFromErrc) {
    std::error_code ec = dlock::errc::timeout;
    EXPECT_EQ(ec.category(), dlock::category());
    EXPECT_EQ(ec.value(), static_cast<int>(errc::timeout));
    EXPECT_EQ(ec, errc::timeout);
    EXPECT_NE(ec, errc::lock_lost);
    EXPECT_EQ(ec, dlock::make_error_code(errc::timeout));
}

TEST(ErrorCode, DistinctFromGenericCodesWithSameValue) {
    const std::error_code generic(static_cast<int>(errc::timeout), std::generic_category());
    EXPECT_NE(generic, errc::timeout);
    EXPECT_NE(std::make_error_code(std::errc::timed_out), errc::timeout);
}

TEST(IsContention, OnlyTimeoutAndAttemptsExhausted) {
    for (const auto e : all_codes) {
        const bool expected = e == errc::timeout || e == errc::attempts_exhausted;
        EXPECT_EQ(dlock::is_contention(e), expected) << dlock::make_error_code(e).message();
    }
    EXPECT_FALSE(dlock::is_contention(std::error_code{}));
    EXPECT_FALSE(dlock::is_contention(std::make_error_code(std::errc::timed_out)));
    EXPECT_FALSE(dlock::is_contention(
        std::error_code(static_cast<int>(errc::timeout), std::generic_category())));
}

TEST(ErrorException, CarriesCodeAndMessage) {
    try {
        throw dlock::error(errc::lock_lost, "lock \"jobs/a\" expired");
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), errc::lock_lost);
        EXPECT_NE(std::string(e.what()).find("lock \"jobs/a\" expired"), std::string::npos)
            << e.what();
        return;
    }
    FAIL() << "not caught as std::system_error";
}

TEST(ErrorException, CodeOnlyUsesCategoryMessage) {
    const dlock::error e(errc::not_owner);
    EXPECT_EQ(e.code(), errc::not_owner);
    EXPECT_NE(std::string(e.what()).find(dlock::make_error_code(errc::not_owner).message()),
              std::string::npos)
        << e.what();
}

TEST(ErrorException, FromErrorCode) {
    const dlock::error e(std::error_code(errc::auth_failed), "WRONGPASS");
    EXPECT_EQ(e.code(), errc::auth_failed);
    EXPECT_NE(std::string(e.what()).find("WRONGPASS"), std::string::npos);
    const std::runtime_error& base = e;  // catchable as a std::runtime_error too
    EXPECT_NE(std::string(base.what()).find("WRONGPASS"), std::string::npos);
}

// ---- core/status.hpp ------------------------------------------------------------------------

TEST(StatusMessage, FailStoresMessageForThatCode) {
    std::error_code ec;
    dlock::detail::fail(ec, errc::invalid_argument, "lock_options.lease must be > 0");
    EXPECT_EQ(ec, errc::invalid_argument);
    EXPECT_EQ(dlock::detail::message_for(ec), "lock_options.lease must be > 0");
    // Another code falls back to its category message.
    const std::error_code other = errc::timeout;
    EXPECT_EQ(dlock::detail::message_for(other), other.message());
}

TEST(StatusMessage, ThreadLocal) {
    std::error_code ec;
    dlock::detail::fail(ec, errc::server_error, "main thread detail");
    std::string seen_elsewhere;
    std::thread([&] { seen_elsewhere = dlock::detail::message_for(ec); }).join();
    EXPECT_EQ(seen_elsewhere, ec.message());
    EXPECT_EQ(dlock::detail::message_for(ec), "main thread detail");
}

TEST(StatusMessage, ThrowIf) {
    EXPECT_NO_THROW(dlock::detail::throw_if(std::error_code{}));
    std::error_code ec;
    dlock::detail::fail(ec, errc::unsupported, "rediss:// needs TLS");
    try {
        dlock::detail::throw_if(ec);
        FAIL() << "did not throw";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::unsupported);
        EXPECT_NE(std::string(e.what()).find("rediss:// needs TLS"), std::string::npos) << e.what();
    }
}

}  // namespace
