// backend::inspect's backend-neutral parts: the quorum view over several servers (Redlock) and
// the default for backends that cannot inspect. No I/O.
#include "core/inspect.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <dlock/error.hpp>

#include "fakes.hpp"

namespace {

using namespace std::chrono_literals;

dlock::lock_info held_view(std::int64_t lease_ms, std::uint64_t fence) {
    dlock::lock_info v;
    v.type = dlock::lock_type::mutex;
    v.held = true;
    v.holders = 1;
    v.lease_left = std::chrono::milliseconds(lease_ms);
    v.fencing_counter = fence;
    return v;
}

dlock::lock_info failed_view(std::string why) {
    dlock::lock_info v;
    v.error = std::move(why);
    return v;
}

TEST(InspectMerge, HeldOnAQuorumWithTheQuorumthLongestLease) {
    std::error_code ec;
    const auto info = dlock::detail::merge_views(
        "a", {held_view(900, 7), held_view(500, 9), dlock::lock_info{}}, 2, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.held_on, 2u);
    EXPECT_EQ(info.type, dlock::lock_type::mutex);
    EXPECT_EQ(info.holders, 1u);
    ASSERT_TRUE(info.lease_left);
    EXPECT_EQ(*info.lease_left, 500ms);   // a quorum still holds it this long
    EXPECT_EQ(info.fencing_counter, 9u);  // the largest: the next token exceeds it
    EXPECT_EQ(info.servers.size(), 3u);
    EXPECT_EQ(info.quorum, 2u);
}

TEST(InspectMerge, HeldOnFewerThanAQuorumIsNotHeld) {
    std::error_code ec;
    const auto info = dlock::detail::merge_views(
        "a", {held_view(900, 7), dlock::lock_info{}, dlock::lock_info{}}, 2, ec);
    ASSERT_FALSE(ec);
    EXPECT_FALSE(info.held);
    EXPECT_EQ(info.held_on, 1u);
    EXPECT_EQ(info.holders, 0u);
    EXPECT_FALSE(info.lease_left);
    EXPECT_EQ(info.type, dlock::lock_type::mutex);  // what the servers that have state show
}

TEST(InspectMerge, FewerThanAQuorumReadableIsAnError) {
    std::error_code ec;
    const auto info = dlock::detail::merge_views(
        "a", {held_view(900, 7), failed_view("redis b:2: refused"), failed_view("redis c:3: x")}, 2,
        ec);
    EXPECT_EQ(ec, dlock::errc::quorum_unreachable);
    EXPECT_NE(dlock::detail::message_for(ec).find("redis b:2: refused"), std::string::npos);
    EXPECT_FALSE(info.held);
    EXPECT_TRUE(info.servers.empty());
}

TEST(InspectMerge, AFailedServerBelowTheQuorumStillGivesAView) {
    std::error_code ec;
    const auto info = dlock::detail::merge_views(
        "a", {held_view(900, 7), held_view(800, 7), failed_view("redis c:3: refused")}, 2, ec);
    ASSERT_FALSE(ec);
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.servers[2].error, "redis c:3: refused");
}

TEST(InspectDefault, FakeBackendReportsItsHeldNames) {
    dlock_test::fake_backend b;
    auto grant = b.acquire("x", dlock::lock_options{});
    const auto info = b.inspect("x");
    EXPECT_TRUE(info.held);
    EXPECT_EQ(info.type, dlock::lock_type::mutex);
    EXPECT_EQ(info.fencing_counter, 1u);
    EXPECT_FALSE(b.inspect("y").held);
    EXPECT_EQ(b.inspect("y").type, dlock::lock_type::none);
}

/// A backend that does not override inspect().
class bare_backend final : public dlock::backend {
public:
    using dlock::backend::acquire_until;
    dlock::lease acquire_until(std::string_view, const dlock::lock_request&,
                               const dlock::lock_options&, std::chrono::steady_clock::time_point,
                               std::error_code& ec) noexcept override {
        ec = dlock::errc::unsupported;
        return {};
    }
};

TEST(InspectDefault, UnsupportedUnlessTheBackendCanInspect) {
    bare_backend b;
    std::error_code ec;
    (void)b.inspect("x", ec);
    EXPECT_EQ(ec, dlock::errc::unsupported);
    try {
        (void)b.inspect("x");
        FAIL() << "no throw";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::unsupported);
    }
}

TEST(InspectDefault, TypeNames) {
    EXPECT_STREQ(dlock::to_string(dlock::lock_type::counting_semaphore),
                 "dlock::counting_semaphore");
    EXPECT_STREQ(dlock::to_string(dlock::lock_type::none), "none");
}

}  // namespace
