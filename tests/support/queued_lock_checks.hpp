// Regression scenarios shared by the two queued kinds on Redis, dlock::fair_mutex ("fair") and the
// writer side of dlock::shared_mutex ("write"), which use the same hand-off protocol
// (docs/lock-family.md): a waiter paused past its hand-off must never accept that stale grant, and
// a first acquire whose reply is lost must leave nothing held or queued.
//
// Include from one test file per binary and call register_queued_waiter_role() from a static
// initializer there (child roles are per binary).
#pragma once

#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <memory>
#include <vector>
#include <string>
#include <thread>

#include "child_process.hpp"
#include "redis_server.hpp"
#include "fenced_resource.hpp"
#include "redis_tap.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace dlock::test {

/// The exclusive side of one queued kind, behind one interface.
class queued_lock {
public:
    virtual ~queued_lock() = default;
    virtual void lock() = 0;
    virtual void unlock() = 0;
    virtual std::uint64_t fencing_token() const = 0;
    virtual std::chrono::milliseconds expires_in() const = 0;
    virtual bool try_lock() = 0;
};

inline std::unique_ptr<queued_lock> make_queued_lock(const std::string& kind,
                                                     dlock::redis::client& redis,
                                                     const std::string& name,
                                                     dlock::lock_options options = {}) {
    struct fair final : queued_lock {
        dlock::fair_mutex m;
        fair(dlock::redis::client& r, const std::string& n, dlock::lock_options o)
            : m(r, n, std::move(o)) {}
        void lock() override { m.lock(); }
        void unlock() override { m.unlock(); }
        std::uint64_t fencing_token() const override { return m.fencing_token(); }
        std::chrono::milliseconds expires_in() const override { return m.expires_in(); }
        bool try_lock() override { return m.try_lock(); }
    };
    struct write final : queued_lock {
        dlock::shared_mutex m;
        write(dlock::redis::client& r, const std::string& n, dlock::lock_options o)
            : m(r, n, std::move(o)) {}
        void lock() override { m.lock(); }
        void unlock() override { m.unlock(); }
        std::uint64_t fencing_token() const override { return m.fencing_token(); }
        std::chrono::milliseconds expires_in() const override { return m.expires_in(); }
        bool try_lock() override { return m.try_lock(); }
    };
    if (kind == "fair") return std::make_unique<fair>(redis, name, std::move(options));
    return std::make_unique<write>(redis, name, std::move(options));
}

inline long long queued_integer_of(const dlock::redis::reply& r) {
    if (r.is_nil()) return 0;
    return r.type == dlock::redis::reply::kind::integer ? r.integer : std::stoll(r.text);
}

/// A fence counter value above the server's clock in microseconds (until the year 2128): a name
/// whose counter starts here gets tokens counter + 1, + 2, ... one per grant (a token is
/// max(counter + 1, the server's clock in us), docs/redis-lock.md), so a test can count grants.
inline constexpr std::uint64_t counter_base = 5'000'000'000'000'000;

/// Sets the fence counter of lock key `key` to counter_base; returns it.
inline std::uint64_t start_counter(dlock::redis::client& redis, const std::string& key) {
    redis.command({"SET", key + ":fence", std::to_string(counter_base)});
    return counter_base;
}

/// Child role "queued_waiter": args url, kind, lock name, marker key. Takes the lock (30 s lease),
/// then sets the marker to its fencing token and sleeps until killed.
inline bool register_queued_waiter_role() {
    return register_child("queued_waiter", [](const std::vector<std::string>& args) {
        using namespace std::chrono_literals;
        dlock::redis::client redis({.url = args.at(0)});
        const auto lock = make_queued_lock(args.at(1), redis, args.at(2), {.lease = 30s});
        lock->lock();
        redis.command({"SET", args.at(3), std::to_string(lock->fencing_token())});
        std::this_thread::sleep_for(10min);
        return 0;
    });
}

/// The liveness deadline of every entry of the waiters' liveness key, joined (a change shows a
/// refresh). Works for either layout of that key (hash or sorted set).
inline std::string liveness_snapshot(dlock::redis::client& redis, const std::string& key) {
    const auto type = redis.command({"TYPE", key}).text;
    const auto r = type == "hash" ? redis.command({"HGETALL", key})
                                  : redis.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
    std::string out;
    for (const auto& e : r.elements) out += e.text + ",";
    return out;
}

/// Freezes (SIGSTOP) the waiter `child` whose entry heads the queue `queue` (liveness ZSET
/// `alive`) of lock key `key` at an instant when none of its requests is in flight. A waiter
/// attempts once more right after its hand-off channel's SUBSCRIBE is confirmed, then refreshes
/// every liveness / 3: a waiter stopped before that attempt lands would still be granted by it
/// (with its full lease) after whatever the test does next. So: wait for `channels` hand-off
/// channels of the lock, then for the head's liveness deadline to move (that attempt or a later
/// refresh landed), and stop it then, a refresh period before its next request.
inline ::testing::AssertionResult freeze_between_refreshes(
    dlock::redis::client& redis, const std::string& key, const std::string& queue,
    const std::string& alive, std::size_t channels, child_process& child) {
    using namespace std::chrono_literals;
    if (!eventually(
            [&] {
                return redis.command({"PUBSUB", "CHANNELS", key + ":released:*"}).elements.size() >=
                       channels;
            },
            10s))
        return ::testing::AssertionFailure() << "fewer than " << channels << " hand-off channels";
    const auto head = redis.command({"ZRANGE", queue, "0", "0"});
    if (head.elements.empty()) return ::testing::AssertionFailure() << queue << " is empty";
    const auto score = [&] { return redis.command({"ZSCORE", alive, head.elements[0].text}).text; };
    const auto before = score();
    if (!eventually([&] { return score() != before; }, 10s))
        return ::testing::AssertionFailure() << "the head never refreshed its liveness";
    child.stop_signal(SIGSTOP);
    return ::testing::AssertionSuccess();
}

/// W heads the queue and is frozen (SIGSTOP) past the hand-off lease; H's unlock hands the lock
/// to W (fence 2), that grant expires unused, X acquires (fence 3). W resumes with the stale
/// "granted" message waiting on its subscriber connection: it must not return a lease while X
/// holds, and the lease it gets after X's unlock must carry a token above X's.
inline void paused_head_never_accepts_a_stale_grant(const std::string& kind) {
    using namespace std::chrono_literals;
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name(kind);
    const auto marker = unique_name("marker");
    const auto resource = unique_name("resource");
    const auto key = redis.lock_key(name);
    const auto queue_length = [&] {
        return queued_integer_of(redis.command({"ZCARD", key + ":queue"}));
    };

    const auto base = start_counter(redis, key);
    const auto h = make_queued_lock(kind, redis, name, {.lease = 30s});
    h->lock();
    ASSERT_EQ(h->fencing_token(), base + 1);
    child_process w("queued_waiter", {shared_redis().url(), kind, name, marker});
    ASSERT_TRUE(eventually([&] { return queue_length() == 1; }, 10s));
    // Frozen right after one of its refreshes: nothing of W's in flight, and its liveness (2 s)
    // surely fresh at the unlock below even on a loaded machine.
    ASSERT_TRUE(freeze_between_refreshes(redis, key, key + ":queue", key + ":alive", 1, w));
    h->unlock();  // W's liveness is still fresh: the hand-off goes to W (fence base + 2)
    ASSERT_EQ(queued_integer_of(redis.command({"EXISTS", key})), 1)
        << "the hand-off did not go to the frozen waiter";
    // Nobody extends that grant: it expires after the hand-off lease.
    ASSERT_TRUE(eventually(
        [&] {
            return queued_integer_of(redis.command({"EXISTS", key})) == 0;
        },
        10s));
    const auto x = make_queued_lock(kind, redis, name, {.lease = 30s});
    x->lock();
    const auto x_token = x->fencing_token();
    ASSERT_EQ(x_token, base + 3);
    ASSERT_EQ(fenced_write(redis, resource, x->fencing_token()), 1);

    w.stop_signal(SIGCONT);
    // W wakes up, reads the stale message and refreshes. Watch three of its refreshes (each one
    // is followed by a look at the latest message): it must stay a waiter all along.
    std::string before = liveness_snapshot(redis, key + ":alive");
    for (int refresh = 0; refresh < 3; ++refresh) {
        ASSERT_TRUE(eventually(
            [&] {
                return !redis.command({"GET", marker}).is_nil() ||
                       liveness_snapshot(redis, key + ":alive") != before;
            },
            10s));
        const auto early = redis.command({"GET", marker});
        ASSERT_TRUE(early.is_nil()) << "the paused waiter returned a lease with token "
                                    << early.text << " while X holds token " << x_token;
        before = liveness_snapshot(redis, key + ":alive");
    }
    EXPECT_EQ(queue_length(), 1) << "W is queued again";

    x->unlock();  // now the hand-off goes to W's new queue entry
    ASSERT_TRUE(eventually([&] { return !redis.command({"GET", marker}).is_nil(); }, 10s));
    const auto w_token = std::stoull(redis.command({"GET", marker}).text);
    EXPECT_GT(w_token, x_token);
    EXPECT_EQ(fenced_write(redis, resource, w_token), 1)
        << "the fenced resource rejected the rightful holder's token " << w_token;
    w.kill9();
    w.wait(10s);
}

/// The reply to the first acquire is lost after the script ran (the connection closes): the call
/// throws, and the server must hold nothing for us, neither the lock (`held_by_other` false: the
/// script granted it) nor a queue entry (`held_by_other` true: the script queued us).
inline void lost_first_reply_leaves_nothing(const std::string& kind, bool held_by_other) {
    using namespace std::chrono_literals;
    dlock::redis::client direct({.url = shared_redis().url()});
    const auto name = unique_name(kind);
    const auto key = direct.lock_key(name);
    // Load the scripts on the server first, so the cut request is the script itself (an EVALSHA
    // answered NOSCRIPT would be cut instead, before anything ran).
    {
        const auto warm = make_queued_lock(kind, direct, unique_name("warm"));
        warm->lock();
        warm->unlock();
    }
    const auto base = start_counter(direct, key);
    std::unique_ptr<queued_lock> other;
    if (held_by_other) {
        other = make_queued_lock(kind, direct, name, {.lease = 30s});
        other->lock();
    }
    reply_cutter proxy(shared_redis().port(), key);
    dlock::redis::client cut({.url = proxy.url(), .command_timeout = 2s});
    const auto victim = make_queued_lock(kind, cut, name, {.lease = 30s});
    EXPECT_THROW(victim->lock(), dlock::error);
    ASSERT_TRUE(proxy.cut());
    EXPECT_EQ(queued_integer_of(direct.command({"GET", key + ":fence"})),
              static_cast<long long>(base + 1))
        << "one grant so far";
    EXPECT_EQ(queued_integer_of(direct.command({"ZCARD", key + ":queue"})), 0)
        << "a queue entry is left behind";
    if (held_by_other) {
        other->unlock();
    } else {
        EXPECT_EQ(queued_integer_of(direct.command({"EXISTS", key})), 0)
            << "the lock is still held for the lost reply's owner";
    }
    // Free for the next client at once.
    const auto next = make_queued_lock(kind, direct, name, {.lease = 30s, .max_attempts = 1});
    EXPECT_NO_THROW(next->lock());
}

/// A hand-off grant is valid for no longer than every bound on it: the hand-off lease, the
/// owner's own lease and max_hold, all counted from the refresh that preceded the grant.
inline void handoff_validity_is_capped(const std::string& kind, dlock::lock_options options,
                                       std::chrono::milliseconds cap) {
    using namespace std::chrono_literals;
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name(kind);
    const auto key = redis.lock_key(name);
    const auto base = start_counter(redis, key);
    const auto holder = make_queued_lock(kind, redis, name, {.lease = 30s});
    holder->lock();
    std::atomic<long long> left_ms{-1};
    std::atomic<std::uint64_t> token{0};
    std::jthread waiter([&] {
        const auto w = make_queued_lock(kind, redis, name, options);
        w->lock();
        left_ms = w->expires_in().count();  // at once: before any renewal
        token = w->fencing_token();
        w->unlock();
    });
    // Queued, subscribed, and past the attempt that follows the subscription: asleep until the
    // hand-off message (or its next refresh).
    EXPECT_TRUE(eventually(
        [&] {
            return queued_integer_of(redis.command({"ZCARD", key + ":queue"})) == 1 &&
                   redis.command({"PUBSUB", "CHANNELS", key + ":released:*"}).elements.size() == 1;
        },
        10s));
    const auto seen = liveness_snapshot(redis, key + ":alive");
    EXPECT_TRUE(eventually([&] { return liveness_snapshot(redis, key + ":alive") != seen; }, 10s));
    holder->unlock();
    waiter.join();
    EXPECT_EQ(token.load(), base + 2) << "granted by hand-off";
    EXPECT_GT(left_ms.load(), 0);
    EXPECT_LE(left_ms.load(), cap.count()) << "validity beyond the grant's own bound";
}

/// Every key of the name carries a TTL (or is gone) once a waiter queued, was handed the lock and
/// released it, and another waiter gave up; the fencing counter too, kept for the client's
/// idle_expiry (docs/redis-lock.md, "Fencing tokens and key expiry").
inline void keys_of_an_unused_name_expire(const std::string& kind) {
    using namespace std::chrono_literals;
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto name = unique_name(kind);
    const auto key = redis.lock_key(name);
    const auto ttl = [&](const std::string& k) {
        return queued_integer_of(redis.command({"PTTL", k}));
    };
    const auto holder = make_queued_lock(kind, redis, name, {.lease = 30s});
    holder->lock();
    std::jthread waiter([&] {
        const auto w = make_queued_lock(kind, redis, name, {.lease = 30s});
        w->lock();
        w->unlock();
    });
    EXPECT_TRUE(eventually(
        [&] {
            return queued_integer_of(redis.command({"ZCARD", key + ":queue"})) == 1;
        },
        10s));
    for (const auto* suffix : {":queue", ":alive", ":arrivals"}) {
        EXPECT_GT(ttl(key + suffix), 0) << suffix << " has no TTL while a waiter is queued";
    }
    holder->unlock();
    waiter.join();
    {
        const auto quitter = make_queued_lock(kind, redis, name, {.lease = 30s});
        holder->lock();
        EXPECT_FALSE(quitter->try_lock());
        holder->unlock();
    }
    const auto scan = redis.command({"SCAN", "0", "MATCH", key + "*", "COUNT", "100000"});
    ASSERT_EQ(scan.elements.size(), 2u);
    ASSERT_EQ(scan.elements[0].text, "0");
    bool fence_seen = false;
    for (const auto& k : scan.elements[1].elements) {
        if (k.text == key + ":fence") {
            fence_seen = true;
            EXPECT_GT(ttl(k.text), 0) << "the fencing counter never expires";
            EXPECT_LE(ttl(k.text), 24 * 3600 * 1000) << "kept longer than the idle period";
            continue;
        }
        const auto left = ttl(k.text);
        EXPECT_TRUE(left > 0 || left == -2) << k.text << " never expires (PTTL " << left << ")";
    }
    EXPECT_TRUE(fence_seen);
}

/// A refresh with many queued waiters costs the same as with a few: the commands the acquire
/// script (and the leave that follows a try_lock) run on the server are point or bounded-range
/// operations, and as many with 1000 waiters as with 10. Counted with MONITOR on a private
/// server, so no timing is involved.
inline void refresh_cost_does_not_grow_with_the_queue(const std::string& kind) {
    using namespace std::chrono_literals;
    redis_server server;
    dlock::redis::client redis({.url = server.url()});
    const auto trace = [&](int waiters) {
        const auto name = unique_name(kind + std::to_string(waiters));
        const auto key = redis.lock_key(name);
        // The holder is of the same kind (its token names the kind, as the kind guard reads it).
        redis.command({"SET", key, kind + ":someone-else", "PX", "60000"});
        const auto t = redis.command({"TIME"});
        const auto now_ms = std::stoll(t.elements[0].text) * 1000;
        // The liveness key's layout (hash or sorted set) as the scripts under test make it.
        std::string layout;
        {
            std::jthread probe([&] {
                // Three attempts: queued for one refresh period (liveness / 3), then it leaves.
                const auto p = make_queued_lock(kind, redis, name, {.max_attempts = 3});
                EXPECT_THROW(p->lock(), dlock::error);
            });
            EXPECT_TRUE(eventually(
                [&] {
                    layout = redis.command({"TYPE", key + ":alive"}).text;
                    return layout != "none";
                },
                10s));
        }
        const bool hash = layout == "hash";
        std::vector<std::string> queue{"ZADD", key + ":queue"},
            alive{hash ? "HSET" : "ZADD", key + ":alive"};
        for (int i = 1; i <= waiters; ++i) {
            const auto token = "waiter" + std::to_string(i);
            queue.insert(queue.end(), {std::to_string(i), token});
            // Two of them are dead (liveness passed): purging them is part of the refresh.
            const auto deadline = std::to_string(i <= 2 ? now_ms - 10'000 : now_ms + 3'600'000);
            if (hash) {
                alive.insert(alive.end(), {token, deadline});
            } else {
                alive.insert(alive.end(), {deadline, token});
            }
        }
        redis.command(queue);
        redis.command(alive);
        redis.command({"SET", key + ":arrivals", std::to_string(waiters)});
        monitor_tap tap(server.port());
        const auto w = make_queued_lock(kind, redis, name);
        EXPECT_FALSE(w->try_lock());
        const auto marker = unique_name("end-of-trace");
        redis.command({"ECHO", marker});
        std::vector<std::string> commands;
        for (const auto& line : tap.lines_until(marker, 10s)) {
            const auto lua = line.find("[0 lua] ");
            if (lua != std::string::npos) commands.push_back(line.substr(lua + 8));
        }
        return commands;
    };
    const auto few = trace(10);
    const auto many = trace(1000);
    EXPECT_EQ(few.size(), many.size()) << "the number of commands grows with the queue";
    const auto bounded = [](const std::string& c) {
        for (const auto* point :
             {"\"GET\"", "\"SET\"", "\"PEXPIRE\"", "\"PTTL\"", "\"TYPE\"", "\"TIME\"", "\"INCR\"",
              "\"ZSCORE\"", "\"ZADD\"", "\"ZREM\"", "\"ZCARD\"", "\"EXISTS\"", "\"PUBLISH\"",
              "\"DEL\"", "\"HSET\"", "\"HDEL\"", "\"HGET\""}) {
            if (c.starts_with(point)) return true;
        }
        // Ranges: the head only, or the members whose deadline has passed.
        if (c.starts_with("\"ZRANGE\"")) return c.find("\"0\" \"0\"") != std::string::npos;
        if (c.starts_with("\"ZRANGEBYSCORE\"") || c.starts_with("\"ZREMRANGEBYSCORE\""))
            return c.find("\"-inf\"") != std::string::npos;
        return false;
    };
    for (const auto& c : many) EXPECT_TRUE(bounded(c)) << "not O(log n): " << c;
}

}  // namespace dlock::test
