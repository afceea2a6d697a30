// Owner tokens (128 random bits as 32 lowercase hex digits) and retry jitter bounds.
#include <gtest/gtest.h>

#include <climits>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

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

// The bytes come in batches per thread: a forked child starts with a copy of its parent's batch,
// and must not hand out the tokens the parent hands out next.
TEST(RandomToken, AForkedChildDoesNotRepeatItsParentsNextTokens) {
    (void)random_token();  // a batch with unused bytes in it
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::string tokens;
        for (int i = 0; i < 4; ++i) tokens += random_token();
        const auto n = ::write(out[1], tokens.data(), tokens.size());
        ::_exit(n == static_cast<ssize_t>(tokens.size()) ? 0 : 1);
    }
    ::close(out[1]);
    std::string theirs(4 * 32, '\0');
    std::size_t got = 0;
    while (got < theirs.size()) {
        const auto n = ::read(out[0], theirs.data() + got, theirs.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
    }
    ::close(out[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(got, theirs.size());
    std::unordered_set<std::string> child_tokens;
    for (std::size_t i = 0; i < 4; ++i) child_tokens.insert(theirs.substr(32 * i, 32));
    for (int i = 0; i < 4; ++i) {
        const auto mine = random_token();
        EXPECT_FALSE(child_tokens.contains(mine)) << "the child handed out " << mine << " too";
    }
}

// Each thread has a batch of its own: tokens drawn on several threads at once are all distinct.
TEST(RandomToken, ThreadsDrawDistinctTokens) {
    std::vector<std::vector<std::string>> drawn(4);
    {
        std::vector<std::jthread> threads;
        for (auto& d : drawn)
            threads.emplace_back([&d] {
                for (int i = 0; i < 1000; ++i) d.push_back(random_token());
            });
    }
    std::unordered_set<std::string> seen;
    for (const auto& d : drawn)
        for (const auto& t : d) EXPECT_TRUE(seen.insert(t).second) << "duplicate token " << t;
    EXPECT_EQ(seen.size(), 4000u);
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
