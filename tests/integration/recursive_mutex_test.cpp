// dlock::recursive_mutex on one Redis server: exclusion with nested locking across threads and
// processes, the server-side depth counter, re-entry of a lost grant, renewal at depth, the std
// adapters, and a name that belongs to another lock kind.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

/// GET then SET: two round trips with a gap, so concurrent unlocked callers overwrite each other.
void unsafe_increment(dlock::redis::client& redis, const std::string& counter) {
    const auto current = redis.command({"GET", counter});
    const long long value = current.is_nil() ? 0 : std::stoll(current.text);
    std::this_thread::sleep_for(50us);
    redis.command({"SET", counter, std::to_string(value + 1)});
}

long long read_counter(dlock::redis::client& redis, const std::string& counter) {
    const auto r = redis.command({"GET", counter});
    return r.is_nil() ? 0 : std::stoll(r.text);
}

/// The server's depth counters in the lock's hash: the value of every field but "fence".
std::vector<long long> server_depths(dlock::redis::client& redis, const std::string& name) {
    const auto r = redis.command({"HGETALL", redis.lock_key(name)});
    std::vector<long long> out;
    for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) {
        if (r.elements[i].text != "fence") out.push_back(std::stoll(r.elements[i + 1].text));
    }
    return out;
}

/// Locks `m` `levels` times, increments the counter at the innermost level and again at the
/// outer one after leaving the inner levels (which must not have released the lock).
/// While holding, checks the fencing token: the same at every level, and (with `last`, shared by
/// every owner) strictly larger than the previous grant's. Returns false if a check failed.
bool nested_increment(dlock::recursive_mutex& m, dlock::redis::client& redis,
                      const std::string& counter, int levels,
                      std::atomic<std::uint64_t>* last = nullptr) {
    std::unique_lock outer(m);
    const auto token = m.fencing_token();
    bool ok = !last || token > last->exchange(token);
    for (int l = 1; l < levels; ++l) m.lock();
    if (m.depth() != static_cast<std::size_t>(levels) || m.fencing_token() != token) ok = false;
    unsafe_increment(redis, counter);
    for (int l = 1; l < levels; ++l) m.unlock();
    unsafe_increment(redis, counter);
    return ok;
}

TEST(RecursiveMutex, EightThreadsNestedIncrementsAreExact) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = unique_name("counter");
    constexpr int threads = 8, increments = 100;
    // One object shared by every thread: each thread is its own owner.
    dlock::recursive_mutex m(redis, unique_name("lock"), {.lease = 10s});
    std::atomic<std::uint64_t> last_token{0};
    std::atomic<int> bad_tokens{0};
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            for (int i = 0; i < increments; ++i) {
                if (!nested_increment(m, redis, counter, 2 + (i + t) % 2, &last_token))
                    ++bad_tokens;
            }
        });
    }
    workers.clear();
    EXPECT_EQ(read_counter(redis, counter), 2 * threads * increments);
    EXPECT_EQ(bad_tokens.load(), 0) << "same token at every depth, larger for the next owner";
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(m.name())}).integer, 0);
}

const bool counter_child =
    dlock::test::register_child("recursive_counter", [](const std::vector<std::string>& args) {
        // args: url, lock name, counter key, increments
        dlock::redis::client redis({.url = args.at(0)});
        dlock::recursive_mutex m(redis, args.at(1), {.lease = 10s});
        const int n = std::stoi(args.at(3));
        for (int i = 0; i < n; ++i) {
            if (!nested_increment(m, redis, args.at(2), 2 + i % 2)) return 10;
        }
        return 0;
    });

TEST(RecursiveMutex, ThreeProcessesNestedIncrementsAreExact) {
    ASSERT_TRUE(counter_child);
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto counter = unique_name("counter");
    const auto name = unique_name("lock");
    constexpr int processes = 3, increments = 100;
    std::vector<std::unique_ptr<dlock::test::child_process>> children;
    for (int p = 0; p < processes; ++p) {
        children.push_back(std::make_unique<dlock::test::child_process>(
            "recursive_counter", std::vector<std::string>{shared_redis().url(), name, counter,
                                                          std::to_string(increments)}));
    }
    for (auto& child : children) EXPECT_EQ(child->wait(120s), 0) << "10: token changed at depth";
    EXPECT_EQ(read_counter(redis, counter), 2 * processes * increments);
}

TEST(RecursiveMutex, DepthIsCountedOnTheServerAndTheLastUnlockWakesAWaiter) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::redis::client other({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto lease = 30s;  // far longer than the wake-up we expect
    dlock::recursive_mutex m(redis, name, {.lease = lease});
    m.lock();
    m.lock();
    m.lock();
    EXPECT_EQ(m.depth(), 3u);
    EXPECT_EQ(server_depths(redis, name), std::vector<long long>{3});
    m.unlock();
    m.unlock();
    EXPECT_EQ(m.depth(), 1u);
    EXPECT_EQ(server_depths(redis, name), std::vector<long long>{1});
    const auto first_token = m.fencing_token();

    dlock::recursive_mutex theirs(other, name, {.lease = lease});
    if (theirs.try_lock()) {
        ADD_FAILURE() << "one level is still held";
        theirs.unlock();
    }
    std::atomic<bool> got{false};
    std::uint64_t their_token = 0;
    std::jthread waiter([&] {
        // Bounded, so that a failing test cannot hang: lock() would wait the same way.
        if (!theirs.try_lock_for(scaled(10s))) return;
        their_token = theirs.fencing_token();
        got = true;
        theirs.unlock();
    });
    ASSERT_TRUE(eventually(
        [&] {
            const auto r = redis.command({"PUBSUB", "NUMSUB", redis.release_channel(name)});
            return r.elements.size() == 2 && r.elements[1].integer >= 1;
        },
        5s))
        << "the waiter sleeps on the release channel";
    EXPECT_FALSE(got.load());
    const auto released_at = std::chrono::steady_clock::now();
    m.unlock();
    EXPECT_EQ(m.depth(), 0u);
    ASSERT_TRUE(eventually([&] { return got.load(); }, 5s));
    EXPECT_LT(std::chrono::steady_clock::now() - released_at, scaled(2s))
        << "woken by the release, not by the lease running out";
    waiter.join();
    EXPECT_GT(their_token, first_token) << "the next owner gets a larger fencing token";
}

TEST(RecursiveMutex, SameFencingTokenAtEveryDepth) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::recursive_mutex m(redis, unique_name(), {.lease = 10s});
    m.lock();
    const auto token = m.fencing_token();
    for (int d = 2; d <= 4; ++d) {
        ASSERT_TRUE(m.try_lock()) << "the owner always gets one more level";
        EXPECT_EQ(m.fencing_token(), token);
        EXPECT_EQ(m.depth(), static_cast<std::size_t>(d));
    }
    ASSERT_TRUE(m.try_lock_for(0ms));
    EXPECT_EQ(m.fencing_token(), token);
    for (int d = 0; d < 5; ++d) m.unlock();
    EXPECT_EQ(m.depth(), 0u);
    m.lock();
    EXPECT_GT(m.fencing_token(), token);
    m.unlock();
}

TEST(RecursiveMutex, AnotherThreadIsAnotherOwnerEvenWithTheSameObject) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::recursive_mutex m(redis, unique_name(), {.lease = 10s});
    m.lock();
    m.lock();
    const auto mine = m.fencing_token();
    std::atomic<bool> tried{false}, blocked{false}, got{false};
    std::atomic<std::size_t> depth_seen{99};
    std::atomic<std::uint64_t> token_seen{0};
    std::jthread other([&] {
        blocked = !m.try_lock() && !m.try_lock_for(scaled(100ms));
        depth_seen = m.depth();  // 0: this thread holds nothing
        m.unlock();              // not held by this thread: harmless
        tried = true;
        if (!m.try_lock_for(scaled(10s))) return;  // bounded, so a failing test cannot hang
        token_seen = m.fencing_token();
        got = true;
        m.unlock();
    });
    ASSERT_TRUE(eventually([&] { return tried.load(); }, 5s));
    EXPECT_TRUE(blocked.load()) << "the other thread waits like another process";
    EXPECT_EQ(depth_seen.load(), 0u);
    EXPECT_EQ(m.depth(), 2u) << "its unlock() did not take our levels";
    EXPECT_EQ(server_depths(redis, m.name()), std::vector<long long>{2});
    EXPECT_FALSE(got.load());
    m.unlock();
    EXPECT_EQ(server_depths(redis, m.name()), std::vector<long long>{1}) << "one level is left";
    EXPECT_FALSE(got.load());
    m.unlock();
    ASSERT_TRUE(eventually([&] { return got.load(); }, 5s));
    other.join();
    EXPECT_GT(token_seen.load(), mine);
}

TEST(RecursiveMutex, ReenteringALostGrantThrowsLockLost) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::recursive_mutex m(redis, unique_name(), {.lease = scaled(900ms)});
    m.lock();
    m.lock();
    const auto lost = m.lost_token();
    EXPECT_FALSE(lost.stop_requested());
    redis.command({"DEL", redis.lock_key(m.name())});
    try {
        m.lock();
        FAIL() << "re-entry of a deleted grant must not take the lock anew";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::lock_lost) << e.what();
    }
    EXPECT_THROW((void)m.try_lock(), dlock::error);
    EXPECT_EQ(m.depth(), 2u) << "the levels held stay for unlock()";
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(m.name())}).integer, 0)
        << "nothing was taken anew";
    // The watchdog's next renewal finds the key gone.
    EXPECT_TRUE(eventually([&] { return lost.stop_requested(); }, 3s));
    EXPECT_EQ(m.state(), dlock::lock_state::lost);
    EXPECT_EQ(m.expires_in(), 0ms);
    m.unlock();
    m.unlock();  // never throws; the failed releases go to the client's error handler
    EXPECT_EQ(m.depth(), 0u);
    m.lock();  // a fresh grant
    EXPECT_EQ(m.state(), dlock::lock_state::held);
    m.unlock();
}

TEST(RecursiveMutex, ReenteringAForeignLeaseIsNotOwnerAsOnEveryBackend) {
    // backend.hpp: lock_request::reenter naming another client's or another lock's lease is
    // errc::not_owner on every backend (ZooKeeper answers the same), and takes nothing.
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::redis::client other({.url = shared_redis().url()});
    const auto name = unique_name();
    std::error_code ec;
    auto outer = redis.acquire_until(name, {.kind = dlock::lock_kind::reentrant}, {}, {}, ec);
    ASSERT_FALSE(ec) << ec.message();
    auto bad = other.acquire_until(name, {.kind = dlock::lock_kind::reentrant, .reenter = &outer},
                                   {}, {}, ec);
    EXPECT_EQ(ec, dlock::errc::not_owner) << "another client's lease";
    EXPECT_FALSE(bad);
    bad = redis.acquire_until(name + "x", {.kind = dlock::lock_kind::reentrant, .reenter = &outer},
                              {}, {}, ec);
    EXPECT_EQ(ec, dlock::errc::not_owner) << "another lock's lease";
    const dlock::lease empty;
    bad = redis.acquire_until(name, {.kind = dlock::lock_kind::reentrant, .reenter = &empty}, {},
                              {}, ec);
    EXPECT_EQ(ec, dlock::errc::not_owner) << "an empty lease";
    bad = redis.acquire_until(name, {.kind = dlock::lock_kind::exclusive, .reenter = &outer}, {},
                              {}, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "re-entry is for the reentrant kind only";
    EXPECT_EQ(server_depths(redis, name), (std::vector<long long>{1})) << "nothing was taken";
}

TEST(RecursiveMutex, WatchdogKeepsAShortLeaseAliveAtDepthTwo) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::redis::client other({.url = shared_redis().url()});
    const auto name = unique_name();
    const auto lease = scaled(1s);
    dlock::recursive_mutex m(redis, name, {.lease = lease});
    m.lock();
    m.lock();
    const auto lost = m.lost_token();
    std::this_thread::sleep_for(3 * lease);  // the point of the test: time passes while held
    EXPECT_FALSE(lost.stop_requested());
    EXPECT_EQ(m.state(), dlock::lock_state::held);
    EXPECT_GT(m.expires_in(), 0ms);
    EXPECT_EQ(server_depths(redis, name), std::vector<long long>{2});
    dlock::recursive_mutex theirs(other, name, {.lease = lease});
    EXPECT_FALSE(theirs.try_lock());
    m.unlock();
    EXPECT_FALSE(lost.stop_requested()) << "one level left";
    EXPECT_FALSE(theirs.try_lock());
    m.unlock();
    EXPECT_TRUE(lost.stop_requested()) << "fires when fully unlocked";
    EXPECT_TRUE(theirs.try_lock());
    theirs.unlock();
}

TEST(RecursiveMutex, ObserversWhenNotHeld) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::recursive_mutex m(redis, unique_name());
    try {
        (void)m.fencing_token();
        FAIL() << "fencing_token() needs a grant";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::not_owner);
    }
    EXPECT_EQ(m.depth(), 0u);
    EXPECT_EQ(m.state(), dlock::lock_state::lost);
    EXPECT_EQ(m.expires_in(), 0ms);
    EXPECT_TRUE(m.lost_token().stop_requested());
    m.unlock();  // harmless
    EXPECT_THROW(dlock::recursive_mutex(redis, ""), dlock::error);
    EXPECT_THROW(dlock::recursive_mutex(redis, "x", {.lease = 1ms}), dlock::error);
}

TEST(RecursiveMutex, ANameHeldByAPlainMutexIsAClearErrorAndNothingIsDeleted) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    dlock::mutex plain(redis, name, {.lease = 10s});
    plain.lock();
    const auto owner = redis.command({"GET", redis.lock_key(name)}).text;
    dlock::recursive_mutex m(redis, name, {.lease = 10s});
    try {
        m.lock();
        FAIL() << "the name belongs to another lock kind";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::unexpected_reply) << e.what();
        EXPECT_NE(std::string(e.what()).find("a dlock::mutex holds"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW((void)m.try_lock(), dlock::error) << "cannot tell: not false";
    EXPECT_EQ(m.depth(), 0u);
    EXPECT_EQ(redis.command({"GET", redis.lock_key(name)}).text, owner) << "nothing deleted";
    EXPECT_EQ(plain.state(), dlock::lock_state::held);
    plain.unlock();
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 0);

    // The other way round: the plain mutex refuses a name the recursive one holds.
    m.lock();
    EXPECT_THROW((void)plain.try_lock(), dlock::error);
    EXPECT_EQ(server_depths(redis, name), std::vector<long long>{1});
    m.unlock();
}

}  // namespace

namespace {

/// A re-entry whose request reaches the server after the client gave up on it (a paused server:
/// the request waits in the socket buffer) raised the server depth without the client knowing.
/// The owner's last unlock must still remove the key, not leave it blocking everyone for a lease.
TEST(RecursiveMutex, TimedOutReentryThatLandsLateIsUndoneByTheLastUnlock) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(300ms)});
    const auto name = unique_name();
    dlock::recursive_mutex m(redis, name, {.lease = 30s});
    m.lock();
    ASSERT_EQ(server_depths(redis, name), std::vector<long long>{1});
    server.pause();
    EXPECT_THROW(m.lock(), dlock::error) << "the re-entry times out";
    server.resume();
    // The late request is executed once the server runs again.
    ASSERT_TRUE(eventually([&] { return server_depths(redis, name) == std::vector<long long>{2}; },
                           scaled(5s)))
        << "the late re-entry landed";
    EXPECT_EQ(m.depth(), 1u);
    m.unlock();
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 0)
        << "the last unlock removed the key whatever the server depth";
    dlock::recursive_mutex other(redis, name, {.lease = 30s});
    EXPECT_TRUE(other.try_lock());
    other.unlock();

    // At depth 2: the inner unlock leaves one level (the owner still holds it), the last goes.
    m.lock();
    m.lock();
    server.pause();
    EXPECT_THROW(m.lock(), dlock::error);
    server.resume();
    ASSERT_TRUE(eventually([&] { return server_depths(redis, name) == std::vector<long long>{3}; },
                           scaled(5s)));
    m.unlock();
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 1) << "still held";
    EXPECT_EQ(m.state(), dlock::lock_state::held);
    m.unlock();
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 0);
}

}  // namespace
