// Faults against dlock::counting_semaphore on Redis: holders killed with SIGKILL (their permits
// come back when their leases run out, nobody else's are touched) and a holder paused past its
// lease (it sees the loss; its permit was counted free meanwhile).
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;
using steady = std::chrono::steady_clock;

const bool permit_holder =
    dlock::test::register_child("permit_holder", [](const std::vector<std::string>& args) {
        // args: url, semaphore name, permits, count, lease ms, marker key. Takes `count` permits,
        // says so, then holds them (renewed) until killed.
        dlock::redis::client redis({.url = args.at(0)});
        dlock::counting_semaphore sem(redis, args.at(1),
                                      static_cast<std::uint32_t>(std::stoul(args.at(2))),
                                      {.lease = std::chrono::milliseconds(std::stoll(args.at(4)))});
        sem.acquire(static_cast<std::uint32_t>(std::stoul(args.at(3))));
        redis.command({"SET", args.at(5), std::to_string(sem.fencing_token())});
        const auto deadline = steady::now() + 60s;
        while (steady::now() < deadline && sem.state() != dlock::lock_state::lost)
            std::this_thread::sleep_for(5ms);
        return 10;  // killed before this in the tests
    });

std::unique_ptr<dlock::test::child_process> start_holder(const std::string& name, int permits,
                                                         int count, std::chrono::milliseconds lease,
                                                         const std::string& marker) {
    return std::make_unique<dlock::test::child_process>(
        "permit_holder",
        std::vector<std::string>{shared_redis().url(), name, std::to_string(permits),
                                 std::to_string(count), std::to_string(lease.count()), marker});
}

TEST(SemaphoreFault, KilledHolderOfTwoOfThreeGetsThemBackAfterItsLease) {
    ASSERT_TRUE(permit_holder);
    std::atomic<int> errors{0};
    dlock::redis::client redis(
        {.url = shared_redis().url(),
         .error_handler = [&](std::error_code, std::string_view) { ++errors; }});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    const auto lease = scaled(1500ms);
    auto holder = start_holder(name, 3, 2, lease, marker);
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    dlock::counting_semaphore third(redis, name, 3, {.lease = lease});
    ASSERT_TRUE(third.try_acquire()) << "1 of 3 left";
    const auto third_token = third.fencing_token();
    dlock::counting_semaphore probe(redis, name, 3);
    EXPECT_FALSE(probe.try_acquire()) << "all 3 held";

    // Survive a few of the child's renewals first: held permits do not come back while renewed.
    std::this_thread::sleep_for(lease);
    EXPECT_FALSE(probe.try_acquire()) << "the live holder's renewals keep its permits";

    holder->kill9();
    const auto killed_at = steady::now();
    EXPECT_EQ(holder->wait(scaled(5s)), 128 + SIGKILL);
    dlock::counting_semaphore waiter(redis, name, 3);
    ASSERT_TRUE(waiter.try_acquire_for(lease + scaled(1s), 2))
        << "the dead holder's 2 permits come back when its lease runs out";
    const auto back_after = steady::now() - killed_at;
    EXPECT_LE(back_after, lease + scaled(1s));
    EXPECT_GE(back_after, lease / 3) << "not before its last renewal ran out";
    EXPECT_GT(waiter.fencing_token(), third_token);

    // Exactly the dead holder's 2 came back: the third holder still has its permit.
    EXPECT_FALSE(probe.try_acquire());
    EXPECT_EQ(third.state(), dlock::lock_state::held);
    EXPECT_FALSE(third.lost_token().stop_requested());
    EXPECT_EQ(third.fencing_token(), third_token);
    third.release();
    EXPECT_TRUE(probe.try_acquire()) << "the third holder's release frees its permit";
    EXPECT_EQ(errors.load(), 0) << "no release or renewal failed on this side";
}

TEST(SemaphoreFault, SeveralKilledHoldersAllComeBack) {
    ASSERT_TRUE(permit_holder);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto lease = scaled(1000ms);
    std::vector<std::string> markers;
    std::vector<std::unique_ptr<dlock::test::child_process>> holders;
    for (int i = 0; i < 3; ++i) {
        markers.push_back(unique_name("marker"));
        holders.push_back(start_holder(name, 4, 1, lease, markers.back()));
    }
    for (const auto& marker : markers) {
        ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    }
    dlock::counting_semaphore sem(redis, name, 4);
    EXPECT_FALSE(sem.try_acquire(2)) << "3 of 4 held";
    for (auto& h : holders) h->kill9();
    for (auto& h : holders) EXPECT_EQ(h->wait(scaled(5s)), 128 + SIGKILL);
    EXPECT_TRUE(sem.try_acquire_for(lease + scaled(1s), 4)) << "all 4 permits back";
    // Nothing of the dead holders is left on the server.
    EXPECT_EQ(redis.command({"ZCARD", redis.lock_key(name)}).integer, 1);
    EXPECT_EQ(redis.command({"HLEN", redis.lock_key(name) + ":counts"}).integer, 1);
}

TEST(SemaphoreFault, HolderPausedPastItsLeaseSeesTheLoss) {
    ASSERT_TRUE(permit_holder);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto marker = unique_name("marker");
    const auto lease = scaled(1000ms);
    auto holder = start_holder(name, 1, 1, lease, marker);
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    holder->stop_signal(SIGSTOP);
    dlock::counting_semaphore sem(redis, name, 1);
    ASSERT_TRUE(sem.try_acquire_for(lease + scaled(1s))) << "the paused holder's permit expires";
    holder->stop_signal(SIGCONT);
    // The child leaves its watch loop once its watchdog reports the grant lost (exit code 10).
    EXPECT_EQ(holder->wait(scaled(10s)), 10) << "the resumed holder sees its grant lost";
    EXPECT_EQ(sem.state(), dlock::lock_state::held) << "its late renewal did not touch ours";
    EXPECT_EQ(redis.command({"ZCARD", redis.lock_key(name)}).integer, 1);
}

}  // namespace
