// dlock::multi_lock over in-memory backends: the global acquisition order whatever the caller's
// order, all-or-nothing (a failing part releases those taken before it, last first), rejected
// duplicates, one deadline for the whole set, the combined observers (fencing tokens in the
// caller's order, worst state, smallest expiry, lost_token firing when any part is lost), and use
// through std::unique_lock / std::scoped_lock / std::lock.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/multi_lock.hpp>

#include "fakes.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::errc;
using dlock::lock_kind;
using dlock::lock_part;
using dlock::lock_state;
using dlock::multi_lock;
using dlock_test::fake_backend;
using steady = std::chrono::steady_clock;
using strings = std::vector<std::string>;

// A fake_backend that writes "<id>:<name>" for every acquire into a log shared by several
// backends (so the order across backends shows), can fail or contend on chosen names, and keeps
// the lease state of every grant so a test can make it lost or uncertain.
class logging_backend final : public dlock::backend {
public:
    logging_backend(std::string id, strings& log) : id_(std::move(id)), log_(log) {}

    using dlock::backend::acquire_until;
    [[nodiscard]] dlock::lease acquire_until(std::string_view name,
                                             const dlock::lock_request& request,
                                             const dlock::lock_options& options,
                                             steady::time_point deadline,
                                             std::error_code& ec) noexcept override {
        log_.push_back(id_ + ":" + std::string(name));
        if (const auto it = fail_on.find(std::string(name)); it != fail_on.end()) {
            dlock::detail::fail(ec, it->second,
                                "scripted failure of \"" + std::string(name) + "\"");
            return {};
        }
        auto grant = inner.acquire_until(name, request, options, deadline, ec);
        if (grant) {
            auto* core = dlock::detail::lease_access::core(grant);
            cores[std::string(name)] = core;
            if (lose_on_grant.count(std::string(name)) != 0) core->lose(errc::lock_lost);
        }
        return grant;
    }

    fake_backend inner;
    std::map<std::string, std::error_code> fail_on;  // these names fail with that code
    std::set<std::string> lose_on_grant;             // these names are lost as soon as granted
    std::map<std::string, dlock::detail::lease_core*> cores;  // valid while the grant lives

private:
    std::string id_;
    strings& log_;
};

struct two_backends {
    strings log;
    logging_backend one{"one", log};
    logging_backend two{"two", log};
};

std::vector<std::string> kinds_of(const std::vector<dlock::lock_request>& requests) {
    std::vector<std::string> kinds;
    for (const auto& r : requests) kinds.emplace_back(dlock::to_string(r.kind));
    return kinds;
}

// ---- construction ----------------------------------------------------------------------------

TEST(MultiLock, RejectsDuplicatesOfTheSameLockOnTheSameBackend) {
    two_backends b;
    try {
        multi_lock m({{b.one, "a"}, {b.two, "a"}, {b.one, "b"}, {b.one, "a"}});
        FAIL() << "accepted a lock listed twice";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument);
        const std::string what = e.what();
        EXPECT_NE(what.find("part 4 of 4"), std::string::npos) << what;
        EXPECT_NE(what.find("repeats part 1"), std::string::npos) << what;
    }
    // The kind does not matter: one name is one lock (a read and a write of it would self-block).
    EXPECT_THROW(multi_lock({{b.one, "a", {.kind = lock_kind::read}},
                             {b.one, "a", {.kind = lock_kind::write}}}),
                 dlock::error);
    EXPECT_TRUE(b.log.empty()) << "the constructor contacts no server";
    // The same name on two backends is two locks.
    multi_lock ok({{b.one, "a"}, {b.two, "a"}});
    ok.lock();
    EXPECT_EQ(ok.fencing_tokens().size(), 2u);
}

TEST(MultiLock, RejectsEmptySetEmptyNameAndBadOptions) {
    two_backends b;
    const auto code_of = [](auto make) {
        try {
            make();
        } catch (const dlock::error& e) {
            return e.code();
        }
        return std::error_code();
    };
    EXPECT_EQ(code_of([] { multi_lock m(std::vector<lock_part>{}); }), errc::invalid_argument);
    EXPECT_EQ(code_of([&] { multi_lock m({{b.one, "a"}, {b.two, ""}}); }), errc::invalid_argument);
    EXPECT_EQ(code_of([&] {
                  multi_lock m({{b.one, "a"}}, {.lease = 0ms});
              }),
              errc::invalid_argument);
    EXPECT_EQ(code_of([&] {
                  multi_lock m({{b.one, "a"}}, {.max_attempts = 0u});
              }),
              errc::invalid_argument);
    EXPECT_TRUE(b.log.empty());
}

// ---- the global order ------------------------------------------------------------------------

TEST(MultiLock, TakesPartsInTheGlobalOrderWhateverTheCallersOrder) {
    two_backends b;
    b.one.inner.fencing = 100;  // tokens show which backend granted which part
    b.two.inner.fencing = 200;
    const std::vector<std::vector<lock_part>> listings = {
        {{b.two, "zeta"}, {b.one, "alpha"}, {b.two, "mid"}},
        {{b.one, "alpha"}, {b.two, "mid"}, {b.two, "zeta"}},
        {{b.two, "mid"}, {b.two, "zeta"}, {b.one, "alpha"}},
    };
    for (const auto& parts : listings) {
        b.log.clear();
        multi_lock m(parts);
        m.lock();
        EXPECT_EQ(b.log, (strings{"one:alpha", "two:mid", "two:zeta"}));
        // Tokens come back in the caller's order, each from its own part's grant.
        const auto tokens = m.fencing_tokens();
        ASSERT_EQ(tokens.size(), 3u);
        for (std::size_t i = 0; i < parts.size(); ++i) {
            const auto& expected_backend = &parts[i].service == &b.one ? b.one : b.two;
            EXPECT_EQ(tokens[i], expected_backend.cores.at(parts[i].name)->fencing_token()) << i;
        }
        m.unlock();
    }
}

TEST(MultiLock, SameNameOnTwoBackendsHasOneOrderToo) {
    two_backends b;
    multi_lock forward({{b.one, "x"}, {b.two, "x"}});
    multi_lock backward({{b.two, "x"}, {b.one, "x"}});
    forward.lock();
    const auto first = b.log;
    forward.unlock();
    b.log.clear();
    backward.lock();
    EXPECT_EQ(b.log, first);
}

TEST(MultiLock, ReleasesInReverseOrderOfTaking) {
    two_backends b;
    b.two.inner.owner = b.one.inner.owner;  // one release log for both backends
    multi_lock m({{b.two, "c"}, {b.one, "a"}, {b.two, "b"}});
    m.lock();
    EXPECT_EQ(b.one.inner.owner->held.size(), 3u);
    m.unlock();
    EXPECT_EQ(b.one.inner.owner->released_names, (strings{"c", "b", "a"}));
    EXPECT_TRUE(b.one.inner.owner->held.empty());
    m.unlock();  // harmless when not held
    EXPECT_EQ(b.one.inner.owner->releases, 3);
}

TEST(MultiLock, PassesEachPartsRequestThrough) {
    two_backends b;
    multi_lock m({{b.one, "w", {.kind = lock_kind::write}},
                  {b.one, "s", {.kind = lock_kind::permits, .count = 2, .limit = 5}},
                  {b.one, "e"}});
    m.lock();
    // Global order e, s, w.
    EXPECT_EQ(kinds_of(b.one.inner.requests), (strings{"exclusive", "permits", "write"}));
    EXPECT_EQ(b.one.inner.requests[1].count, 2u);
    EXPECT_EQ(b.one.inner.requests[1].limit, 5u);
}

// ---- all or nothing --------------------------------------------------------------------------

TEST(MultiLock, ContendedPartReleasesThePartsTakenBeforeIt) {
    two_backends b;
    b.two.inner.owner = b.one.inner.owner;
    auto blocker = b.two.inner.acquire("c", {});  // someone else holds c
    const auto& owner = *b.one.inner.owner;
    multi_lock m({{b.two, "d"}, {b.two, "c"}, {b.one, "a"}, {b.one, "b"}});

    EXPECT_FALSE(m.try_lock());
    EXPECT_EQ(b.log, (strings{"one:a", "one:b", "two:c"})) << "stops at the contended part";
    EXPECT_EQ(owner.released_names, (strings{"b", "a"})) << "last taken first";
    EXPECT_EQ(owner.held, (std::set<std::string>{"c"})) << "only the other holder's lock";
    EXPECT_EQ(m.state(), lock_state::lost);
    EXPECT_TRUE(m.lost_token().stop_requested());
    EXPECT_THROW((void)m.fencing_tokens(), dlock::error);

    EXPECT_FALSE(m.try_lock_for(10ms));
    EXPECT_FALSE(m.try_lock_until(std::chrono::system_clock::now() + 10ms));
    EXPECT_EQ(owner.held, (std::set<std::string>{"c"}));

    blocker = dlock::lease();
    EXPECT_TRUE(m.try_lock());
    EXPECT_EQ(owner.held.size(), 4u);
}

TEST(MultiLock, BackendFailureOfAPartThrowsAndReleasesThePartsBefore) {
    two_backends b;
    b.two.inner.owner = b.one.inner.owner;
    const auto& owner = *b.one.inner.owner;
    multi_lock m({{b.two, "d"}, {b.two, "c"}, {b.one, "a"}, {b.one, "b"}});
    for (int which = 0; which < 4; ++which) {
        b.log.clear();
        b.two.fail_on = {{"c", errc::connection_failed}};
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
            const std::string what = e.what();
            EXPECT_NE(what.find("part 2 of 4 (\"c\", exclusive)"), std::string::npos) << what;
            EXPECT_NE(what.find("scripted failure"), std::string::npos) << what;
            EXPECT_NE(what.find("2 part(s) taken before it were released"), std::string::npos)
                << what;
        }
        EXPECT_EQ(b.log, (strings{"one:a", "one:b", "two:c"})) << which;
        EXPECT_TRUE(owner.held.empty()) << which;
        EXPECT_EQ(m.state(), lock_state::lost) << which;
    }
    EXPECT_EQ(owner.released_names, (strings{"b", "a", "b", "a", "b", "a", "b", "a"}));
}

TEST(MultiLock, FailureOfTheFirstPartTakesNothing) {
    two_backends b;
    multi_lock m({{b.one, "b"}, {b.one, "a"}});
    b.one.fail_on = {{"a", errc::server_timeout}};
    try {
        m.lock();
        FAIL();
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::server_timeout);
        EXPECT_EQ(std::string(e.what()).find("released"), std::string::npos) << e.what();
    }
    EXPECT_EQ(b.log, (strings{"one:a"}));
    EXPECT_EQ(b.one.inner.owner->releases, 0);
}

TEST(MultiLock, AttemptsExhaustedIsContentionForTryLockButThrowsFromLock) {
    two_backends b;
    multi_lock m({{b.one, "a"}, {b.two, "b"}});
    b.two.inner.fail_with = errc::attempts_exhausted;
    EXPECT_FALSE(m.try_lock_for(1s));
    EXPECT_TRUE(b.one.inner.owner->held.empty());
    b.two.inner.fail_with = errc::attempts_exhausted;
    try {
        m.lock();
        FAIL() << "lock() returned without the set";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::attempts_exhausted);
    }
    EXPECT_TRUE(b.one.inner.owner->held.empty());
    EXPECT_EQ(m.state(), lock_state::lost);
}

TEST(MultiLock, UnlockNeverThrowsWhenReleasesFail) {
    two_backends b;
    multi_lock m({{b.one, "a"}, {b.two, "b"}});
    m.lock();
    b.one.inner.owner->release_result = errc::connection_failed;
    b.two.inner.owner->release_result = errc::connection_failed;
    static_assert(noexcept(m.unlock()));
    m.unlock();
    EXPECT_EQ(b.one.inner.owner->reported.size(), 1u) << "every part is still released";
    EXPECT_EQ(b.two.inner.owner->reported.size(), 1u);
    EXPECT_EQ(m.state(), lock_state::lost);
}

TEST(MultiLock, DestructorReleasesEveryPart) {
    two_backends b;
    {
        multi_lock m({{b.one, "a"}, {b.two, "b"}});
        m.lock();
    }
    EXPECT_TRUE(b.one.inner.owner->held.empty());
    EXPECT_TRUE(b.two.inner.owner->held.empty());
}

// ---- one deadline for the whole set ----------------------------------------------------------

std::vector<steady::time_point> all_deadlines(two_backends& b) {
    auto out = b.one.inner.deadlines;
    out.insert(out.end(), b.two.inner.deadlines.begin(), b.two.inner.deadlines.end());
    b.one.inner.deadlines.clear();
    b.two.inner.deadlines.clear();
    return out;
}

TEST(MultiLockDeadline, EveryPartGetsTheSameDeadline) {
    two_backends b;
    multi_lock m({{b.one, "a"}, {b.two, "b"}, {b.one, "c"}});

    m.lock();
    EXPECT_EQ(all_deadlines(b), std::vector<steady::time_point>(3, steady::time_point::max()));
    m.unlock();

    const auto before_try = steady::now();
    EXPECT_TRUE(m.try_lock());
    for (const auto d : all_deadlines(b)) EXPECT_LE(d, before_try) << "one attempt each";
    m.unlock();

    const auto before = steady::now();
    EXPECT_TRUE(m.try_lock_for(250ms));
    const auto after = steady::now();
    auto deadlines = all_deadlines(b);
    ASSERT_EQ(deadlines.size(), 3u);
    EXPECT_EQ(deadlines[0], deadlines[1]);
    EXPECT_EQ(deadlines[0], deadlines[2]);
    EXPECT_GE(deadlines[0], before + 250ms);
    EXPECT_LE(deadlines[0], after + 250ms);
    m.unlock();

    // Another clock converts once, on entry: the parts still share one deadline.
    EXPECT_TRUE(m.try_lock_until(std::chrono::system_clock::now() + 1h));
    deadlines = all_deadlines(b);
    EXPECT_EQ(deadlines[0], deadlines[1]);
    EXPECT_EQ(deadlines[0], deadlines[2]);
    EXPECT_GE(deadlines[0], before + 1h - 100ms);
    m.unlock();

    const auto at = steady::now() + 3s;
    EXPECT_TRUE(m.try_lock_until(at));
    EXPECT_EQ(all_deadlines(b), std::vector<steady::time_point>(3, at));
}

TEST(MultiLockDeadline, NegativeMeansNowAndHugeSaturates) {
    two_backends b;
    multi_lock m({{b.one, "a"}, {b.two, "b"}});
    for (const std::chrono::milliseconds timeout : {0ms, -1ms, -3600000ms}) {
        const auto before = steady::now();
        EXPECT_TRUE(m.try_lock_for(timeout));
        const auto after = steady::now();
        for (const auto d : all_deadlines(b)) {
            EXPECT_GE(d, before);
            EXPECT_LE(d, after);
        }
        m.unlock();
    }
    EXPECT_TRUE(m.try_lock_for(dlock::forever));
    EXPECT_EQ(all_deadlines(b), std::vector<steady::time_point>(2, steady::time_point::max()));
    m.unlock();
    EXPECT_TRUE(m.try_lock_until(std::chrono::system_clock::time_point::min()));
    m.unlock();
    EXPECT_TRUE(m.try_lock_until(std::chrono::time_point<steady, std::chrono::seconds>::max()));
    EXPECT_EQ(all_deadlines(b).back(), steady::time_point::max());
}

// ---- observers -------------------------------------------------------------------------------

TEST(MultiLock, ObserversWhenNotHeld) {
    two_backends b;
    multi_lock m({{b.one, "a"}, {b.two, "b"}});
    EXPECT_EQ(m.parts().size(), 2u);
    EXPECT_EQ(m.parts()[1].name, "b");
    EXPECT_EQ(m.state(), lock_state::lost);
    EXPECT_EQ(m.expires_in(), 0ms);
    EXPECT_TRUE(m.lost_token().stop_requested());
    try {
        (void)m.fencing_tokens();
        FAIL();
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::not_owner);
        EXPECT_NE(std::string(e.what()).find("\"a\", \"b\""), std::string::npos) << e.what();
    }
}

TEST(MultiLock, StateIsTheWorstPartAndExpiryTheSmallest) {
    two_backends b;
    multi_lock m({{b.one, "a"}, {b.two, "b"}});
    m.lock();
    EXPECT_EQ(m.state(), lock_state::held);
    EXPECT_GT(m.expires_in(), 50min);
    EXPECT_LE(m.expires_in(), 60min);
    // The fakes grant one hour; renewing one part further leaves the other as the smallest.
    b.one.cores.at("a")->renewed(steady::now() + 2h);
    EXPECT_LE(m.expires_in(), 60min);
    b.two.cores.at("b")->renewed(steady::now() + 3h);
    EXPECT_GT(m.expires_in(), 119min);
    EXPECT_LE(m.expires_in(), 2h);
    b.one.cores.at("a")->renewal_failed();
    EXPECT_EQ(m.state(), lock_state::uncertain);
    EXPECT_FALSE(m.lost_token().stop_requested()) << "uncertain is not lost";
    b.two.cores.at("b")->lose(errc::lock_lost);
    EXPECT_EQ(m.state(), lock_state::lost);
    EXPECT_EQ(m.expires_in(), 0ms);
}

TEST(MultiLock, LostTokenFiresWhenAnyPartIsLost) {
    for (const std::string lost : {"a", "b", "c"}) {
        two_backends b;
        multi_lock m({{b.one, "a"}, {b.two, "b"}, {b.one, "c"}});
        m.lock();
        const auto token = m.lost_token();
        int fired = 0;
        std::stop_callback count(token, [&] { ++fired; });
        EXPECT_FALSE(token.stop_requested());
        auto& owner = lost == "b" ? b.two : b.one;
        owner.cores.at(lost)->lose(errc::lock_lost);
        EXPECT_TRUE(token.stop_requested()) << lost;
        EXPECT_EQ(fired, 1);
        EXPECT_EQ(m.state(), lock_state::lost);
        m.unlock();  // the lost part's release is harmless; the others are released
        EXPECT_EQ(fired, 1) << "fires once";
        EXPECT_TRUE(b.one.inner.owner->held.empty());
        EXPECT_TRUE(b.two.inner.owner->held.empty());
    }
}

TEST(MultiLock, LostTokenFiresOnUnlockAndANewGrantHasAFreshOne) {
    two_backends b;
    multi_lock m({{b.one, "a"}, {b.two, "b"}});
    m.lock();
    const auto first = m.lost_token();
    m.unlock();
    EXPECT_TRUE(first.stop_requested());
    m.lock();
    EXPECT_FALSE(m.lost_token().stop_requested());
    EXPECT_TRUE(first.stop_requested());
}

// A part lost between its grant and the end of lock() must not be missed.
TEST(MultiLock, PartLostDuringAcquisitionFiresAtOnce) {
    two_backends b;
    b.one.lose_on_grant = {"a"};
    multi_lock m({{b.one, "a"}, {b.two, "b"}});
    m.lock();
    EXPECT_TRUE(m.lost_token().stop_requested());
    EXPECT_EQ(m.state(), lock_state::lost);
}

// ---- std lock utilities ----------------------------------------------------------------------

TEST(MultiLockStd, UniqueLockScopedLockAndStdLock) {
    two_backends b;
    multi_lock m1({{b.one, "a"}, {b.two, "b"}});
    multi_lock m2({{b.two, "c"}, {b.one, "d"}});
    {
        std::unique_lock lk(m1);
        EXPECT_TRUE(lk.owns_lock());
        EXPECT_EQ(m1.state(), lock_state::held);
        lk.unlock();
        EXPECT_TRUE(b.one.inner.owner->held.empty());
        EXPECT_TRUE(lk.try_lock_for(1s));
    }
    EXPECT_TRUE(b.one.inner.owner->held.empty());
    {
        std::scoped_lock both(m1, m2);
        EXPECT_EQ(b.one.inner.owner->held.size(), 2u);
        EXPECT_EQ(b.two.inner.owner->held.size(), 2u);
    }
    EXPECT_TRUE(b.one.inner.owner->held.empty());
    EXPECT_TRUE(b.two.inner.owner->held.empty());
    std::lock(m1, m2);
    EXPECT_EQ(m2.state(), lock_state::held);
    m1.unlock();
    m2.unlock();

    multi_lock rival({{b.two, "b"}});
    std::unique_lock held(m1);
    std::unique_lock lk(rival, std::try_to_lock);
    EXPECT_FALSE(lk.owns_lock());
    std::unique_lock timed(rival, 5ms);
    EXPECT_FALSE(timed.owns_lock());
}

}  // namespace
