// Bad input gets a clear error that names the bad value: never a crash, hang or silent success.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "fake_server.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "moved_from.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::fake_server;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

/// Runs `f`, expecting dlock::error with `code` and a message containing `needle`.
template <class F>
void expect_error(F&& f, dlock::errc code, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "expected dlock::error " << make_error_code(code).message();
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
            << "message \"" << e.what() << "\" should mention \"" << needle << "\"";
    }
}

TEST(RedisErrors, AMovedFromClientRefusesEveryCall) {
    dlock::redis::client a({.url = shared_redis().url()});
    dlock::redis::client b(std::move(a));
    dlock::test::expect_moved_from_refuses(
        a, /*has_permits=*/true);  // NOLINT(bugprone-use-after-move)
    dlock::test::expect_moved_from_error("command", [&] { a.command({"PING"}); });  // NOLINT
    EXPECT_NO_THROW(b.acquire(unique_name("moved-to"), {.wait = 0ms}).release());
}

TEST(RedisErrors, EmptyAndOversizedNames) {
    dlock::redis::client redis({.url = shared_redis().url()});
    expect_error([&] { (void)redis.acquire(""); }, dlock::errc::invalid_argument, "empty");
    const std::string huge(dlock::redis::max_name_length + 1, 'x');
    expect_error([&] { (void)redis.acquire(huge); }, dlock::errc::invalid_argument, "1025");
    std::error_code ec;
    auto grant = redis.acquire("", {}, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_FALSE(grant);
    expect_error([&] { dlock::mutex empty_name(redis, ""); }, dlock::errc::invalid_argument,
                 "empty");
    dlock::mutex oversized(redis, huge);  // the length limit is the backend's, checked on use
    expect_error([&] { oversized.lock(); }, dlock::errc::invalid_argument, "limit");
}

TEST(RedisErrors, NonPositiveAndAbsurdLeases) {
    dlock::redis::client redis({.url = shared_redis().url()});
    expect_error([&] { (void)redis.acquire(unique_name(), {.lease = 0ms}); },
                 dlock::errc::invalid_argument, "lease");
    expect_error([&] { (void)redis.acquire(unique_name(), {.lease = -5s}); },
                 dlock::errc::invalid_argument, "-5000ms");
    expect_error([&] { (void)redis.acquire(unique_name(), {.lease = std::chrono::hours(25)}); },
                 dlock::errc::invalid_argument, "90000000ms");
    expect_error([&] { dlock::mutex m(redis, unique_name(), {.lease = 0ms}); },
                 dlock::errc::invalid_argument, "lease");
    expect_error([&] { dlock::mutex m(redis, unique_name(), {.renew_every = 40s}); },
                 dlock::errc::invalid_argument, "renew_every");
}

TEST(RedisErrors, MalformedUrlsAndUnknownSchemes) {
    expect_error([] { dlock::redis::client c({.url = "127.0.0.1:6379"}); },
                 dlock::errc::invalid_argument, "127.0.0.1:6379");
    expect_error([] { dlock::redis::client c({.url = "http://127.0.0.1"}); },
                 dlock::errc::invalid_argument, "http");
    expect_error([] { dlock::redis::client c({.url = "redis://127.0.0.1:99999"}); },
                 dlock::errc::invalid_argument, "99999");
    expect_error([] { dlock::redis::client c({.url = "redis://:6379"}); },
                 dlock::errc::invalid_argument, "host");
    expect_error(
        [] {
            dlock::redis::client c({.url = "rediss://127.0.0.1:6379?tls_ca=/nonexistent/ca.pem"});
        },
        dlock::errc::invalid_argument, "/nonexistent/ca.pem");
    expect_error(
        [] { dlock::redis::client c({.url = shared_redis().url(), .connect_timeout = 0ms}); },
        dlock::errc::invalid_argument, "connect_timeout");
    expect_error([] { dlock::redis::client c({.url = shared_redis().url(), .key_prefix = "a{b"}); },
                 dlock::errc::invalid_argument, "key prefix");
}

TEST(RedisErrors, ConnectionRefused) {
    const auto port = dlock::test::free_port();  // nothing listens there
    dlock::redis::client redis({.url = "redis://127.0.0.1:" + std::to_string(port)});
    expect_error([&] { (void)redis.acquire(unique_name()); }, dlock::errc::connection_failed,
                 std::to_string(port));
    dlock::mutex m(redis, unique_name());
    expect_error([&] { m.lock(); }, dlock::errc::connection_failed, "refused");
    expect_error([&] { (void)m.try_lock(); }, dlock::errc::connection_failed, "refused");
}

TEST(RedisErrors, ServerThatNeverAnswersTimesOut) {
    fake_server silent("");
    dlock::redis::client redis({.url = silent.url(), .command_timeout = scaled(300ms)});
    const auto start = std::chrono::steady_clock::now();
    expect_error([&] { (void)redis.acquire(unique_name()); }, dlock::errc::server_timeout,
                 "in time");
    EXPECT_LT(std::chrono::steady_clock::now() - start, scaled(3s))
        << "bounded by command_timeout, no hang";
}

TEST(RedisErrors, ServerThatAnswersGarbage) {
    fake_server http("HTTP/1.1 400 Bad Request\r\n\r\n");
    dlock::redis::client redis({.url = http.url(), .command_timeout = scaled(1s)});
    expect_error([&] { (void)redis.acquire(unique_name()); }, dlock::errc::protocol_error,
                 "not a Redis server");
}

TEST(RedisErrors, WrongPasswordAndMissingPassword) {
    dlock::test::redis_server secured({.extra_args = {"--requirepass", "s3cret"}});
    const auto authority = "127.0.0.1:" + std::to_string(secured.port());
    {
        dlock::redis::client wrong({.url = "redis://:wrong@" + authority});
        expect_error([&] { (void)wrong.acquire(unique_name()); }, dlock::errc::auth_failed, "AUTH");
    }
    {
        dlock::redis::client none({.url = "redis://" + authority});
        expect_error([&] { (void)none.acquire(unique_name()); }, dlock::errc::auth_failed,
                     "NOAUTH");
    }
    {
        dlock::redis::client right({.url = "redis://:s3cret@" + authority + "/2"});
        auto grant = right.acquire(unique_name(), {.wait = 0s});
        EXPECT_EQ(grant.state(), dlock::lock_state::held);
    }
}

TEST(RedisErrors, AclUserAndDatabaseSelection) {
    dlock::test::redis_server server;
    server.command({"ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all"});
    dlock::redis::client redis(
        {.url = "redis://locker:pw@127.0.0.1:" + std::to_string(server.port()) + "/3"});
    const auto name = unique_name();
    auto grant = redis.acquire(name, {.wait = 0s});
    EXPECT_NE(redis.command({"CLIENT", "INFO"}).text.find(" db=3 "), std::string::npos);
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(name)}).integer, 1)
        << "the lock lives in db 3";
    dlock::redis::client bad(
        {.url = "redis://locker:nope@127.0.0.1:" + std::to_string(server.port())});
    expect_error([&] { (void)bad.acquire(unique_name()); }, dlock::errc::auth_failed, "WRONGPASS");
}

TEST(RedisErrors, LockKeyHoldingAList) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name();
    redis.command({"RPUSH", redis.lock_key(name), "not-a-lock"});
    expect_error([&] { (void)redis.acquire(name, {.wait = 0s}); }, dlock::errc::unexpected_reply,
                 "list");
    dlock::mutex m(redis, name);
    expect_error([&] { (void)m.try_lock(); }, dlock::errc::unexpected_reply, "WRONGTYPE");
    EXPECT_EQ(redis.command({"LLEN", redis.lock_key(name)}).integer, 1)
        << "nothing was overwritten";

    const auto fenced = unique_name("fence");
    redis.command({"SET", redis.fence_key(fenced), "not-a-number"});
    expect_error([&] { (void)redis.acquire(fenced, {.wait = 0s}); }, dlock::errc::unexpected_reply,
                 "fence");
    EXPECT_EQ(redis.command({"EXISTS", redis.lock_key(fenced)}).integer, 0)
        << "no half-taken lock is left";
}

TEST(RedisErrors, PausedServerTimesOutInsteadOfHanging) {
    dlock::test::redis_server server;
    dlock::redis::client redis({.url = server.url(), .command_timeout = scaled(300ms)});
    redis.ping();
    server.pause();
    const auto start = std::chrono::steady_clock::now();
    expect_error([&] { (void)redis.acquire(unique_name()); }, dlock::errc::server_timeout,
                 "in time");
    EXPECT_LT(std::chrono::steady_clock::now() - start, scaled(3s));
    server.resume();
    EXPECT_NO_THROW(redis.ping());
}

/// One name, one lock kind: while a grant of one kind holds a name, an acquire of every other
/// kind is refused with errc::unexpected_reply naming the holder's kind, and never granted.
/// (Readers and the writer are the two sides of one shared_mutex: they exclude each other.)
TEST(RedisErrors, EveryKindIsRefusedOnANameHeldByAnotherKind) {
    dlock::redis::client redis({.url = shared_redis().url()});
    using dlock::lock_kind;
    const lock_kind kinds[] = {lock_kind::exclusive, lock_kind::reentrant, lock_kind::fair,
                               lock_kind::read,      lock_kind::write,     lock_kind::permits};
    const auto family = [](lock_kind k) {
        return k == lock_kind::write ? lock_kind::read : k;  // one shared_mutex
    };
    const auto class_name = [](lock_kind k) -> std::string {
        switch (k) {
            case lock_kind::exclusive: return "dlock::mutex";
            case lock_kind::reentrant: return "dlock::recursive_mutex";
            case lock_kind::fair: return "dlock::fair_mutex";
            case lock_kind::read:
            case lock_kind::write: return "dlock::shared_mutex";
            case lock_kind::permits: return "dlock::counting_semaphore";
        }
        return "?";
    };
    const auto request = [](lock_kind k) {
        dlock::lock_request r;
        r.kind = k;
        r.limit = 2;  // a semaphore with a free permit left: only the kind check can refuse
        return r;
    };
    for (const auto holder_kind : kinds) {
        for (const auto contender_kind : kinds) {
            const auto name = unique_name();
            SCOPED_TRACE(std::string("held by ") + dlock::to_string(holder_kind) + ", then " +
                         dlock::to_string(contender_kind));
            auto held = redis.acquire(name, request(holder_kind), {.lease = 10s, .wait = 0s});
            ASSERT_EQ(held.state(), dlock::lock_state::held);
            dlock::lease second;
            std::error_code ec;
            std::string what;
            try {
                second = redis.acquire(name, request(contender_kind), {.lease = 10s, .wait = 0s});
            } catch (const dlock::error& e) {
                ec = e.code();
                what = e.what();
            }
            const bool same_family = family(holder_kind) == family(contender_kind);
            const bool shares =
                (holder_kind == lock_kind::read && contender_kind == holder_kind) ||
                (holder_kind == lock_kind::permits && contender_kind == holder_kind);
            if (shares) {
                EXPECT_FALSE(ec) << ec.message();
                EXPECT_EQ(second.state(), dlock::lock_state::held);
            } else {
                EXPECT_NE(second.state(), dlock::lock_state::held) << "a second holder was granted";
                if (same_family) {
                    EXPECT_EQ(ec, dlock::errc::timeout) << what;
                } else {
                    EXPECT_EQ(ec, dlock::errc::unexpected_reply) << what;
                    EXPECT_NE(what.find("WRONGTYPE"), std::string::npos) << what;
                    EXPECT_NE(what.find(class_name(holder_kind)), std::string::npos)
                        << "the message names the holder's kind: " << what;
                }
            }
            if (second.state() == dlock::lock_state::held) second.release();
            EXPECT_NO_THROW(held.release());
            // Once the name is free, any kind may use it.
            ec.clear();
            auto after =
                redis.acquire(name, request(contender_kind), {.lease = 10s, .wait = 0s}, ec);
            EXPECT_FALSE(ec) << dlock::to_string(contender_kind)
                             << " after release: " << ec.message();
            if (after.state() == dlock::lock_state::held) after.release();
        }
    }
}

/// A name whose holder is gone but where a live waiter of a queued kind (fair_mutex, the writer
/// side of shared_mutex) waits still belongs to that kind: another kind is refused, not granted.
TEST(RedisErrors, ANameWithALiveQueuedWaiterOfAnotherKindIsRefused) {
    dlock::redis::client redis({.url = shared_redis().url()});
    struct queued_case {
        dlock::lock_kind holder, waiter;
        std::string holder_key_suffix, needle;
    };
    const queued_case cases[] = {
        {dlock::lock_kind::fair, dlock::lock_kind::fair, "", "dlock::fair_mutex"},
        {dlock::lock_kind::read, dlock::lock_kind::write, ":readers", "dlock::shared_mutex"},
    };
    for (const auto& c : cases) {
        const auto name = unique_name();
        SCOPED_TRACE(dlock::to_string(c.waiter));
        auto held = redis.acquire(name, {.kind = c.holder}, {.lease = 10s, .wait = 0s});
        std::atomic<bool> granted{false}, checked{false};
        std::jthread waiter([&] {
            std::error_code ec;
            auto l =
                redis.acquire(name, {.kind = c.waiter}, {.lease = 10s, .wait = scaled(20s)}, ec);
            granted = l.state() == dlock::lock_state::held;
            // Keep the name this kind's until the other kinds were tried: a refresh may take the
            // lock as soon as the holder is gone, and releasing it would leave the name free.
            (void)dlock::test::eventually([&] { return checked.load(); }, scaled(30s));
        });
        const auto queue = redis.lock_key(name) + ":queue";
        ASSERT_TRUE(dlock::test::eventually(
            [&] {
                return redis.command({"ZCARD", queue}).integer == 1;
            },
            scaled(5s)));
        // The holder vanishes (as if its lease ran out); the waiter is still queued and alive.
        redis.command({"DEL", redis.lock_key(name) + c.holder_key_suffix});
        for (const auto other : {dlock::lock_kind::exclusive, dlock::lock_kind::reentrant,
                                 dlock::lock_kind::permits}) {
            try {
                auto l = redis.acquire(name, {.kind = other}, {.lease = 10s, .wait = 0s});
                ADD_FAILURE() << dlock::to_string(other) << " granted beside a queued waiter";
            } catch (const dlock::error& e) {
                EXPECT_EQ(e.code(), dlock::errc::unexpected_reply) << e.what();
                EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
            }
        }
        checked = true;
        waiter.join();  // takes the lock at its next refresh, then releases it
        EXPECT_TRUE(granted.load());
        std::error_code ignored;
        held.release(ignored);
    }
}

}  // namespace
