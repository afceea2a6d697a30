// `dlock run --permits N` on a semaphore whose server records another number warns with both
// numbers, and `dlock set-permits NAME N` changes the number with holders present: they keep
// their permits when it shrinks, and waiters are let in at once when it grows (docs/cli.md).
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::cli_process;
using dlock::test::eventually;
using dlock::test::run_cli;
using dlock::test::shared_redis;
using dlock::test::unique_name;

using namespace dlock::test::exit_status;  // the documented exit statuses

std::string url() { return shared_redis().url(); }

dlock::lock_request permits(std::uint32_t count, std::uint32_t limit) {
    return {.kind = dlock::lock_kind::permits, .count = count, .limit = limit};
}

std::string limit_of(dlock::redis::client& redis, const std::string& name) {
    return redis.command({"GET", redis.lock_key(name) + ":limit"}).text;
}

/// Exactly one line on stderr, starting "dlock: ".
void expect_one_line(const dlock::test::cli_result& r) {
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("dlock: ")) << r.err;
}

TEST(CliSemaphore, APermitMismatchIsWarnedWithBothNumbers) {
    const auto name = unique_name("sem");
    dlock::redis::client redis({.url = url()});
    const auto held = redis.acquire(name, permits(1, 2), {.wait = 0s});
    const auto r =
        run_cli({"run", "--permits", "5", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << "one permit of the recorded two is free: " << r.err;
    EXPECT_NE(r.err.find("dlock: warning: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("has 2 permits on the server, not the 5 asked for"), std::string::npos)
        << r.err;
    EXPECT_EQ(limit_of(redis, name), "2") << "a run never changes the recorded number";
    // The same number: no warning.
    const auto same =
        run_cli({"run", "--permits", "2", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(same.status, 0) << same.err;
    EXPECT_EQ(same.err.find("warning"), std::string::npos) << same.err;
}

TEST(CliSemaphore, ShrinkingBelowTheHoldersKeepsTheirPermits) {
    const auto name = unique_name("sem");
    dlock::redis::client redis({.url = url()});
    auto a = redis.acquire(name, permits(1, 2), {.lease = 1s, .wait = 0s});
    auto b = redis.acquire(name, permits(1, 2), {.lease = 1s, .wait = 0s});
    const auto holders = redis.lock_key(name);
    const auto expiries = [&] {
        return redis.command({"ZRANGE", holders, "0", "-1", "WITHSCORES"});
    };
    auto r = run_cli({"set-permits", "--url", url(), name, "1"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(limit_of(redis, name), "1");
    // Both holders keep their permits: their grants are renewed after the resize (every expiry
    // moves on) and stay held, and no one else gets in.
    const auto before = expiries();
    ASSERT_EQ(before.elements.size(), 4u);
    EXPECT_TRUE(eventually(
        [&] {
            const auto now = expiries();
            return now.elements.size() == 4 && now.elements[1].text != before.elements[1].text &&
                   now.elements[3].text != before.elements[3].text;
        },
        10s))
        << "not renewed after the resize";
    EXPECT_EQ(a.state(), dlock::lock_state::held);
    EXPECT_EQ(b.state(), dlock::lock_state::held);
    r = run_cli({"run", "--permits", "1", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, conflict) << "2 held of 1: " << r.err;
    a.release();
    r = run_cli({"run", "--permits", "1", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, conflict) << "1 held of 1: " << r.err;
    b.release();
    r = run_cli({"run", "--permits", "1", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliSemaphore, GrowingLetsAWaiterIn) {
    const auto name = unique_name("sem");
    dlock::redis::client redis({.url = url()});
    const auto held = redis.acquire(name, permits(1, 1), {.lease = 30s, .wait = 0s});
    cli_process waiter(
        {"run", "--permits", "1", "--wait", "60s", "--url", url(), name, "--", "true"});
    // Waiting: subscribed to the release channel.
    ASSERT_TRUE(eventually(
        [&] {
            const auto n =
                redis.command({"PUBSUB", "NUMSUB", redis.release_channel(name)}).elements;
            return n.size() == 2 && n[1].integer >= 1;
        },
        10s));
    const auto r = run_cli({"set-permits", "--url", url(), name, "2"});
    EXPECT_EQ(r.status, 0) << r.err;
    // Let in by the new permit, while the holder still holds (its lease is 30 s and renewed).
    const auto done = waiter.wait(20s);
    EXPECT_EQ(done.status, 0) << done.err;
    EXPECT_EQ(held.state(), dlock::lock_state::held);
}

TEST(CliSemaphore, SetPermitsBadInput) {
    const auto name = unique_name("sem");
    for (const auto& args :
         std::vector<std::vector<std::string>>{{"set-permits", "--url", url(), name},
                                               {"set-permits", "--url", url(), name, "0"},
                                               {"set-permits", "--url", url(), name, "abc"},
                                               {"set-permits", "--url", url(), name, "1000001"},
                                               {"set-permits", "--url", url()}}) {
        const auto r = run_cli(args);
        EXPECT_EQ(r.status, usage) << args.back() << ": " << r.err;
        expect_one_line(r);
    }
    // A name held by a plain mutex is not a semaphore.
    dlock::redis::client redis({.url = url()});
    const auto mutex_name = unique_name("mutex");
    const auto held = redis.acquire(mutex_name, {.wait = 0s});
    auto r = run_cli({"set-permits", "--url", url(), mutex_name, "3"});
    EXPECT_EQ(r.status, server_error) << r.err;
    expect_one_line(r);
    // Redlock has no semaphore.
    r = run_cli(
        {"set-permits", "--url", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", name, "3"});
    EXPECT_EQ(r.status, unavailable) << r.err;
    expect_one_line(r);
    r = run_cli({"set-permits", "--help"});
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("Usage: dlock set-permits"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Examples:"), std::string::npos) << r.out;
}

}  // namespace
