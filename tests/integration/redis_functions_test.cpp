// dlock's scripts as Redis Functions (docs/redis-lock.md, "Scripts: Redis Functions, EVALSHA as
// the fallback"): a server gets the library on first use and again after FUNCTION FLUSH; a user
// the ACL denies functions runs the same scripts by EVALSHA; releases run on a server out of
// memory; and a call of the library never reads what an earlier call left in it.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "redis/scripts.hpp"

#include "redis_server.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::unique_name;

long calls_of(const std::map<std::string, long>& calls, const std::string& command) {
    const auto it = calls.find(command);
    return it == calls.end() ? 0 : it->second;
}

/// The library's name, as FUNCTION LIST shows it ("#!lua name=<it>" on the library's first line).
std::string library_name() {
    const auto text = dlock::redis::detail::functions_library();
    const auto first_line = text.substr(0, text.find('\n'));
    return std::string(first_line.substr(first_line.find('=') + 1));
}

void lock_and_unlock(dlock::redis::client& redis, const std::string& name) {
    auto grant = redis.acquire(name, {.lease = 10s, .wait = 0s});
    ASSERT_EQ(grant.state(), dlock::lock_state::held);
    grant.release();
}

TEST(RedisFunctions, AServerGetsTheLibraryOnFirstUseAndAfterAFlush) {
    dlock::test::redis_server server;
    EXPECT_EQ(server.command({"FUNCTION", "LIST"}), "");
    dlock::redis::client redis({.url = server.url()});
    const auto name = unique_name();
    lock_and_unlock(redis, name);
    EXPECT_NE(server.command({"FUNCTION", "LIST"}).find(library_name()), std::string::npos);

    ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
    for (int i = 0; i < 5; ++i) lock_and_unlock(redis, name);
    const auto calls = server.command_calls();
    EXPECT_EQ(calls_of(calls, "fcall"), 10) << "an acquire and a release per pair, by FCALL";
    EXPECT_EQ(calls_of(calls, "evalsha") + calls_of(calls, "eval"), 0);

    ASSERT_EQ(server.command({"FUNCTION", "FLUSH"}), "OK");
    lock_and_unlock(redis, name);
    EXPECT_NE(server.command({"FUNCTION", "LIST"}).find(library_name()), std::string::npos)
        << "loaded again";
}

// An ACL user without FCALL and FUNCTION: the scripts run by EVALSHA, after one refused FCALL
// per connection.
TEST(RedisFunctions, AUserDeniedFunctionsRunsTheScriptsByEvalsha) {
    dlock::test::redis_server server;
    ASSERT_EQ(server.command({"ACL", "SETUSER", "scripts", "on", ">Scr1ptsPw", "~*", "&*", "+@all",
                              "-fcall", "-fcall_ro", "-function"}),
              "OK");
    dlock::redis::client redis(
        {.url = "redis://scripts:Scr1ptsPw@127.0.0.1:" + std::to_string(server.port())});
    const auto name = unique_name();
    lock_and_unlock(redis, name);
    ASSERT_EQ(server.command({"CONFIG", "RESETSTAT"}), "OK");
    constexpr int pairs = 10;
    for (int i = 0; i < pairs; ++i) lock_and_unlock(redis, name);
    const auto calls = server.command_calls();
    EXPECT_EQ(calls_of(calls, "evalsha"), 2 * pairs);
    EXPECT_EQ(calls_of(calls, "fcall"), 0) << "a refused connection stops asking";
    EXPECT_EQ(server.command({"FUNCTION", "LIST"}), "");
}

// A release (and a renewal) must run when the server is out of memory, as the same script run by
// EVAL does (its commands free or keep memory): the release functions carry allow-oom. An acquire
// is refused there, with the server's error.
TEST(RedisFunctions, AReleaseRunsOnAServerOutOfMemory) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url()});
    const auto name = unique_name();
    lock_and_unlock(redis, name);  // the library is loaded
    auto grant = redis.acquire(name, {.lease = 10s, .wait = 0s, .renew = false});
    ASSERT_EQ(grant.state(), dlock::lock_state::held);
    ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}), "OK");
    ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "1"}), "OK");
    std::error_code ec;
    EXPECT_THROW((void)redis.acquire(unique_name(), {.lease = 10s, .wait = 0s}), dlock::error);
    grant.release(ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(server.command({"EXISTS", redis.lock_key(name)}), "0") << "released";
    ASSERT_EQ(server.command({"CONFIG", "SET", "maxmemory", "0"}), "OK");
    lock_and_unlock(redis, name);
}

// The library's functions share one Lua state on the server, unlike scripts run by EVALSHA, so
// what one call leaves in the library's own variables is there for the next. The kind guard keeps
// what it read of the lock key (lib/kind_guard.lua, dlock_guard_read) and clears it on every call:
// without that, a fair_mutex attempt that found the key gone (its queue there) read the owner an
// earlier call had seen, its own token, and took itself for the head the lock was handed to.
TEST(RedisFunctions, ACallNeverReadsWhatAnEarlierCallLeft) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url()});
    ASSERT_EQ(redis
                  .command({"FUNCTION", "LOAD", "REPLACE",
                            std::string(dlock::redis::detail::functions_library())})
                  .text,
              library_name());
    const auto* acquire = dlock::redis::detail::find_script("fair_acquire");
    ASSERT_NE(acquire, nullptr);
    const auto name = unique_name("lock");
    const auto key = redis.lock_key(name);
    // KEYS as fair_acquire.lua; ARGV: token, lease, -, -, liveness, channel, -, ticket floor (0:
    // told none), -, idle expiry.
    const auto call = [&](const std::string& token) {
        return redis.command({"FCALL", std::string(acquire->function), "5", key,
                              redis.fence_key(name), key + ":queue", key + ":alive",
                              key + ":arrivals", token, "60000", "1", "0", "60000",
                              redis.release_channel(name), "0", "0", "", "60000"});
    };
    // x holds the name; y queues behind it (the guard read x's token from the key).
    ASSERT_EQ(redis.command({"SET", key, "fair:x.1", "PX", "60000"}).text, "OK");
    const auto queued = call("fair:y.1");
    ASSERT_EQ(queued.elements.size(), 3u) << queued.text;
    EXPECT_EQ(queued.elements[0].integer, 0);
    // x's key runs out (deleted here); y, live, is first in the queue. x tries again: the guard
    // finds the key gone, so it read no owner, and x must queue behind y.
    ASSERT_EQ(redis.command({"DEL", key}).integer, 1);
    const auto again = call("fair:x.1");
    ASSERT_FALSE(again.elements.empty()) << again.text;
    EXPECT_EQ(again.elements[0].integer, 0) << "x was granted past the live head y";
    EXPECT_NE(redis.command({"GET", key}).text, "fair:x.1");
}

}  // namespace
