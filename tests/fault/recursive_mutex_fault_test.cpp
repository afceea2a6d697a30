// Faults against dlock::recursive_mutex on Redis: a holder killed with SIGKILL while it holds
// several levels, and a holder paused past its lease. The lock must come back within the lease,
// with a larger fencing token, and a stale holder must see the loss.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "child_process.hpp"
#include "fenced_resource.hpp"
#include "shared_redis.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::fenced_write;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

// The child tells the parent it holds by creating a file (write, then rename), not by writing a
// Redis key: the server runs a SET before the child has read its reply, so a parent that paused
// the child as soon as the key showed could catch that command in flight, and on SIGCONT it would
// fail with a timeout (the child then exits 98). Creating the file is the child's last step
// before it only waits, so a pause from then on interrupts no request of its own.
void announce(const std::string& path, std::uint64_t token) {
    dlock::test::write_atomically(path, std::to_string(token) + "\n");
}

// The token in the file the child created, once it exists (0 if it never does).
std::uint64_t announced(const std::string& path) {
    if (!eventually([&] { return std::ifstream(path).good(); }, 10s)) return 0;
    std::uint64_t token = 0;
    std::ifstream(path) >> token;
    return token;
}

const bool deep_holder =
    dlock::test::register_child("deep_holder", [](const std::vector<std::string>& args) {
        // args: url, lock name, lease ms, marker file, resource key, depth
        // A short command timeout (for the scale the tests run at), so that the renewal caught
        // in flight by the pause gives up quickly after it.
        dlock::redis::client redis({.url = args.at(0), .command_timeout = scaled(500ms)});
        dlock::recursive_mutex m(redis, args.at(1),
                                 {.lease = std::chrono::milliseconds(std::stoll(args.at(2)))});
        const int depth = std::stoi(args.at(5));
        for (int d = 0; d < depth; ++d) m.lock();
        if (fenced_write(redis, args.at(4), m.fencing_token()) != 1) return 10;
        announce(args.at(3), m.fencing_token());
        // The parent either kills us here, or pauses us past the lease and then resumes us.
        const auto lost = m.lost_token();
        const auto deadline = std::chrono::steady_clock::now() + 60s;
        while (!lost.stop_requested() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(5ms);
        }
        if (!lost.stop_requested()) return 11;  // never noticed the loss
        if (m.state() != dlock::lock_state::lost) return 12;
        if (fenced_write(redis, args.at(4), m.fencing_token()) != 0) return 13;  // stale accepted
        try {
            m.lock();
            return 14;  // re-entry took the lock anew
        } catch (const dlock::error& e) {
            if (e.code() != dlock::errc::lock_lost) return 15;
        }
        for (int d = 0; d < depth; ++d) m.unlock();  // harmless on a lost grant
        return m.depth() == 0 ? 0 : 16;
    });

TEST(RecursiveMutexFault, HolderKilledAtDepthThreeFreesTheLockWithinItsLease) {
    ASSERT_TRUE(deep_holder);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const dlock::test::temp_dir dir("dlock-recursive-fault");
    const auto marker = dir / "holding";
    const auto resource = unique_name("resource");
    const auto lease = scaled(1500ms);
    dlock::test::child_process holder(
        "deep_holder",
        {shared_redis().url(), name, std::to_string(lease.count()), marker, resource, "3"});
    const auto holder_token = announced(marker);
    ASSERT_GT(holder_token, 0u) << "the child holds";
    // The server counts the three levels under the holder's token.
    const auto hash = redis.command({"HGETALL", redis.lock_key(name)});
    ASSERT_EQ(hash.elements.size(), 4u);  // <token> 3, fence <token>
    for (std::size_t i = 0; i < 4; i += 2) {
        if (hash.elements[i].text == "fence")
            EXPECT_EQ(hash.elements[i + 1].text, std::to_string(holder_token));
        else
            EXPECT_EQ(hash.elements[i + 1].text, "3");
    }

    holder.kill9();
    const auto killed_at = std::chrono::steady_clock::now();
    EXPECT_EQ(holder.wait(10s), 128 + SIGKILL);
    dlock::recursive_mutex m(redis, name, {.lease = lease});
    ASSERT_TRUE(m.try_lock_for(lease + scaled(2s))) << "the dead holder's levels expire together";
    const auto waited = std::chrono::steady_clock::now() - killed_at;
    EXPECT_LE(waited, lease + scaled(1s)) << "within the lease plus a margin";
    EXPECT_GE(waited, lease / 3) << "not before its last renewal ran out";
    EXPECT_GT(m.fencing_token(), holder_token);
    EXPECT_EQ(fenced_write(redis, resource, m.fencing_token()), 1);
    EXPECT_EQ(m.depth(), 1u);
    m.unlock();
}

TEST(RecursiveMutexFault, HolderPausedPastItsLeaseSeesLostAndCannotReenter) {
    ASSERT_TRUE(deep_holder);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    const dlock::test::temp_dir dir("dlock-recursive-fault");
    const auto marker = dir / "holding";
    const auto resource = unique_name("resource");
    const auto lease = scaled(1200ms);
    dlock::test::child_process holder(
        "deep_holder",
        {shared_redis().url(), name, std::to_string(lease.count()), marker, resource, "2"});
    ASSERT_GT(announced(marker), 0u) << "the child holds";
    holder.stop_signal(SIGSTOP);  // it only waits now: no request of its own is in flight
    dlock::recursive_mutex m(redis, name);
    ASSERT_TRUE(m.try_lock_for(lease + scaled(2s))) << "the paused holder's lease runs out";
    EXPECT_EQ(fenced_write(redis, resource, m.fencing_token()), 1);
    holder.stop_signal(SIGCONT);
    EXPECT_EQ(holder.wait(30s), 0) << "10: first write, 11: never saw lost, 12: state, "
                                      "13: stale token accepted, 14/15: re-entry, 16: depth";
    EXPECT_EQ(m.depth(), 1u);
    const auto hash = redis.command({"HGETALL", redis.lock_key(name)});
    EXPECT_EQ(hash.elements.size(), 4u) << "the stale holder's unlocks touched nothing of ours";
    m.unlock();
}

}  // namespace
