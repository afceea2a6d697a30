// Owner tokens (128 random bits as 32 lowercase hex digits) and retry jitter bounds.
#include <gtest/gtest.h>

#include <climits>
#include <set>
#include <string>
#include <unordered_set>

#include "core/token.hpp"

namespace {

using dlock::detail::random_jitter_ns;
using dlock::detail::random_token;

bool lowercase_hex(const std::string& s) {
    for (const char c : s) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

TEST(RandomToken, ThirtyTwoLowercaseHexDigits) {
    for (int i = 0; i < 100; ++i) {
        const auto t = random_token();
        EXPECT_EQ(t.size(), 32u) << t;
        EXPECT_TRUE(lowercase_hex(t)) << t;
    }
}

TEST(RandomToken, TenThousandAreDistinct) {
    std::unordered_set<std::string> seen;
    for (int i = 0; i < 10'000; ++i) {
        const auto t = random_token();
        ASSERT_EQ(t.size(), 32u);
        EXPECT_TRUE(seen.insert(t).second) << "duplicate token " << t;
    }
    EXPECT_EQ(seen.size(), 10'000u);
}

TEST(RandomToken, EveryHexDigitAppears) {
    // 100 tokens = 3200 digits; a missing digit (e.g. only 0-9 used) would show here.
    std::set<char> digits;
    for (int i = 0; i < 100; ++i) {
        for (const char c : random_token()) digits.insert(c);
    }
    EXPECT_EQ(digits.size(), 16u);
}

TEST(RandomJitter, ZeroForNonPositiveBound) {
    EXPECT_EQ(random_jitter_ns(0), 0);
    EXPECT_EQ(random_jitter_ns(-1), 0);
    EXPECT_EQ(random_jitter_ns(LLONG_MIN), 0);
}

TEST(RandomJitter, StaysWithinBound) {
    for (const long long bound : {1LL, 2LL, 7LL, 1000LL, 2'000'000LL, LLONG_MAX}) {
        for (int i = 0; i < 2000; ++i) {
            const auto j = random_jitter_ns(bound);
            ASSERT_GE(j, 0) << bound;
            ASSERT_LE(j, bound) << bound;
        }
    }
}

TEST(RandomJitter, CoversTheRange) {
    // bound 1: both 0 and 1 must come up in 2000 draws (probability of failure ~2^-1999).
    std::set<long long> values;
    for (int i = 0; i < 2000; ++i) values.insert(random_jitter_ns(1));
    EXPECT_EQ(values, (std::set<long long>{0, 1}));

    // bound 2'000'000: draws spread over both halves.
    int low = 0, high = 0;
    for (int i = 0; i < 2000; ++i) (random_jitter_ns(2'000'000) < 1'000'000 ? low : high)++;
    EXPECT_GT(low, 100);
    EXPECT_GT(high, 100);
}

}  // namespace
