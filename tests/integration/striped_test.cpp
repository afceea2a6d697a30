// dlock::striped<Lock> on a real redis-server, Redlock's three and ZooKeeper: the fixed key ->
// stripe hash, stripe names and their Redis Cluster slots, exclusion per stripe, lock_all's
// all-or-nothing with one deadline, and the stripe count recorded at first use on every backend
// (backend::record_once; Redlock's majority rule) (docs/granularity.md).
#include <dlock/config.hpp>
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#include <dlock/striped.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "redis_fleet.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;
using dlock::test::shared_redis;
#if DLOCK_HAS_ZOOKEEPER
using dlock::test::shared_zk;
#endif
using dlock::test::unique_name;
using steady = std::chrono::steady_clock;

// Redis Cluster's key -> slot: CRC16 (XMODEM) of the hash tag, mod 16384.
unsigned crc16(std::string_view s) {
    unsigned crc = 0;
    for (const unsigned char c : s) {
        crc ^= static_cast<unsigned>(c) << 8;
        for (int i = 0; i < 8; ++i)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}
unsigned slot_of(const std::string& key) {
    const auto open = key.find('{');
    if (open != std::string::npos) {
        const auto close = key.find('}', open + 1);
        if (close != std::string::npos && close > open + 1)
            return crc16(std::string_view(key).substr(open + 1, close - open - 1)) % 16384;
    }
    return crc16(key) % 16384;
}

TEST(StripedHash, IsFnv1a64ModN) {
    // Reference values of FNV-1a 64 (the published test vectors).
    EXPECT_EQ(dlock::fnv1a_64(""), 0xcbf29ce484222325ull);
    EXPECT_EQ(dlock::fnv1a_64("a"), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(dlock::fnv1a_64("foobar"), 0x85944171f73967e8ull);
    static_assert(dlock::fnv1a_64("a") == 0xaf63dc4c8601ec8cull);
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::striped<dlock::mutex> s(redis, unique_name("stock"), 16);
    EXPECT_EQ(s.stripe_of("foobar"), 0x85944171f73967e8ull % 16);
    EXPECT_EQ(s.stripe_of("sku-42"), dlock::fnv1a_64("sku-42") % 16);
}

TEST(Striped, NamesArePaddedAndSpreadOverClusterSlots) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::striped<dlock::mutex> s(redis, "stock", 64);
    EXPECT_EQ(s.stripe_name(0), "stock/#00");
    EXPECT_EQ(s.stripe_name(63), "stock/#63");
    std::set<unsigned> slots;
    for (std::size_t i = 0; i < s.size(); ++i)
        slots.insert(slot_of(redis.lock_key(s.stripe_name(i))));
    EXPECT_EQ(slots.size(), 64u) << "every stripe in its own slot";
    // A lock key and its fence counter share a slot (the scripts touch both).
    EXPECT_EQ(slot_of(redis.lock_key("stock/#07")), slot_of(redis.fence_key("stock/#07")));
}

TEST(Striped, BadArgumentsAreClearErrors) {
    dlock::redis::client redis({.url = shared_redis().url()});
    EXPECT_THROW(dlock::striped<dlock::mutex>(redis, "x", 0), dlock::error);
    EXPECT_THROW(dlock::striped<dlock::mutex>(redis, "x", dlock::max_stripes + 1), dlock::error);
    EXPECT_THROW(dlock::striped<dlock::mutex>(redis, "", 4), dlock::error);
    EXPECT_THROW(dlock::striped<dlock::mutex>(redis, "a{b}", 4), dlock::error);
    EXPECT_THROW(dlock::striped<dlock::mutex>(redis, "x", 4, {.lease = 0ms}), dlock::error);
    dlock::striped<dlock::mutex> s(redis, unique_name("s"), 4);
    EXPECT_THROW((void)s.stripe(4), dlock::error);
    EXPECT_THROW((void)s.lock_all({}), dlock::error);
}

TEST(Striped, SameStripeExcludesOtherStripesDoNot) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto base = unique_name("stock");
    dlock::striped<dlock::mutex> a(redis, base, 8, {.lease = 10s});
    dlock::striped<dlock::mutex> b(redis, base, 8, {.lease = 10s});
    // Two keys on one stripe and one key on another.
    std::string k1 = "k0", same, other;
    for (int i = 1; same.empty() || other.empty(); ++i) {
        const auto k = "k" + std::to_string(i);
        if (a.stripe_of(k) == a.stripe_of(k1) && same.empty()) same = k;
        if (a.stripe_of(k) != a.stripe_of(k1) && other.empty()) other = k;
    }
    std::lock_guard held(a.get(k1));
    EXPECT_FALSE(b.get(same).try_lock()) << "same stripe: held by a";
    ASSERT_TRUE(b.get(other).try_lock()) << "another stripe is free";
    b.get(other).unlock();
}

TEST(Striped, LockAllTakesDistinctStripesAllOrNothing) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto base = unique_name("stock");
    dlock::striped<dlock::mutex> s(redis, base, 8, {.lease = 10s});
    dlock::striped<dlock::mutex> other(redis, base, 8, {.lease = 10s});
    std::vector<std::string> keys;
    for (int i = 0; keys.size() < 5; ++i) keys.push_back("item-" + std::to_string(i));
    keys.push_back(keys.front());  // a duplicate key: its stripe once
    const auto stripes = s.stripes_of(keys);
    ASSERT_GE(stripes.size(), 2u);
    {
        auto all = s.lock_all(keys);
        ASSERT_TRUE(all);
        EXPECT_EQ(all->parts().size(), stripes.size());
        for (std::size_t i = 0; i < stripes.size(); ++i)
            EXPECT_EQ(all->parts()[i].name, s.stripe_name(stripes[i]));  // stripe order
        for (const auto i : stripes) EXPECT_FALSE(other.stripe(i).try_lock());
    }
    // One stripe held elsewhere: the whole set times out at one deadline, nothing stays held.
    std::unique_lock blocker(other.stripe(stripes.back()));
    const auto start = steady::now();
    auto none = s.try_lock_all_for(keys, scaled(300ms));
    EXPECT_FALSE(none);
    EXPECT_LT(steady::now() - start, scaled(300ms) + scaled(2s));
    for (std::size_t k = 0; k + 1 < stripes.size(); ++k) {
        EXPECT_TRUE(other.stripe(stripes[k]).try_lock()) << "rolled back: stripe " << stripes[k];
        other.stripe(stripes[k]).unlock();
    }
    blocker.unlock();
    EXPECT_TRUE(s.try_lock_all_for(keys, scaled(5s)));
}

TEST(Striped, EightThreadsTransfersConserveTheTotal) {
    // Eight threads (as eight clients would) move units between random items under lock_all; the
    // total is conserved exactly.
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto base = unique_name("stock");
    const auto prefix = unique_name("qty");
    constexpr int items = 20;
    for (int i = 0; i < items; ++i) redis.command({"SET", prefix + std::to_string(i), "100"});
    std::vector<std::jthread> workers;
    for (int t = 0; t < 8; ++t) {
        workers.emplace_back([&, t] {
            dlock::striped<dlock::mutex> s(redis, base, 4, {.lease = 10s});
            for (int n = 0; n < 20; ++n) {
                const auto from = prefix + std::to_string((t * 7 + n) % items);
                const auto to = prefix + std::to_string((t * 3 + n * 5 + 1) % items);
                auto hold = s.lock_all({from, to});
                const auto a = std::stoll(redis.command({"GET", from}).text);
                const auto b = std::stoll(redis.command({"GET", to}).text);
                if (from == to) continue;
                redis.command({"SET", from, std::to_string(a - 1)});
                redis.command({"SET", to, std::to_string(b + 1)});
            }
        });
    }
    workers.clear();
    long long total = 0;
    for (int i = 0; i < items; ++i)
        total += std::stoll(redis.command({"GET", prefix + std::to_string(i)}).text);
    EXPECT_EQ(total, 100LL * items);
}

/// The stripe count's contract on one backend: the first use records it; another count fails
/// with both counts named, before anything is locked, through get() and lock_all(); the same
/// count keeps working; record_once answers the recorded value.
void expect_count_recorded(dlock::backend& b) {
    const auto base = unique_name("stock");
    dlock::striped<dlock::mutex> eight(b, base, 8, {.lease = 10s});
    std::lock_guard held(eight.get("sku-1"));  // first use: records 8
    dlock::striped<dlock::mutex> sixteen(b, base, 16, {.lease = 10s});
    try {
        (void)sixteen.get("sku-1");
        ADD_FAILURE() << "another stripe count was accepted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::invalid_argument);
        const std::string what = e.what();
        EXPECT_NE(what.find("opened with 16 stripes"), std::string::npos) << what;
        EXPECT_NE(what.find("records 8"), std::string::npos) << what;
    }
    EXPECT_THROW((void)sixteen.lock_all({"a", "b"}), dlock::error);
    dlock::striped<dlock::mutex> again(b, base, 8, {.lease = 10s});
    EXPECT_FALSE(again.get("sku-1").try_lock()) << "the same count maps sku-1 to its stripe";
    EXPECT_NO_THROW((void)again.get("sku-2"));
    std::error_code ec;
    EXPECT_EQ(b.record_once(base + "/#stripes", "99", ec), "8");
    EXPECT_FALSE(ec) << ec.message();
    // Bad input: clear errors.
    (void)b.record_once(base + "/r", "", ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "an empty value";
    (void)b.record_once(base + "/r", std::string(dlock::max_record_size + 1, 'v'), ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "a value above max_record_size";
    (void)b.record_once("", "1", ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << "an empty name";
    const auto longest = std::string(dlock::max_record_size, 'v');
    EXPECT_EQ(b.record_once(base + "/long", longest, ec), longest);
    EXPECT_FALSE(ec) << ec.message();
}

/// Two first users racing with different counts: both see one recorded value.
void expect_race_agrees(const std::function<std::unique_ptr<dlock::backend>()>& make) {
    for (int round = 0; round < 5; ++round) {
        const auto name = unique_name("race") + "/#stripes";
        auto b1 = make();
        auto b2 = make();
        std::string got1, got2;
        std::error_code ec1, ec2;
        {
            std::jthread t1([&] { got1 = b1->record_once(name, "4", ec1); });
            std::jthread t2([&] { got2 = b2->record_once(name, "5", ec2); });
        }
        ASSERT_FALSE(ec1) << ec1.message();
        ASSERT_FALSE(ec2) << ec2.message();
        EXPECT_EQ(got1, got2) << "round " << round;
        EXPECT_TRUE(got1 == "4" || got1 == "5") << got1;
    }
}

TEST(StripedCount, RecordedOnRedis) {
    dlock::redis::client redis({.url = shared_redis().url()});
    expect_count_recorded(redis);
    expect_race_agrees([] {
        return std::make_unique<dlock::redis::client>(
            dlock::redis::client_options{.url = shared_redis().url()});
    });
}

dlock::test::redis_fleet& fleet() {
    static dlock::test::redis_fleet three(3);
    return three;
}

/// A paused server costs a call its command_timeout: short, so the majority test stays quick.
std::unique_ptr<dlock::redlock::client> redlock_client() {
    return std::make_unique<dlock::redlock::client>(dlock::redlock::client_options{
        .urls = fleet().urls(), .command_timeout = scaled(300ms), .node_timeout = scaled(250ms)});
}

TEST(StripedCount, RecordedOnRedlock) {
    auto redlock = redlock_client();
    expect_count_recorded(*redlock);
    expect_race_agrees([] { return redlock_client(); });
}

// Redlock's rule: the recorded value is the one a majority of all servers stores. A minority
// down still records and reads; a minority holding another value is outvoted; servers split
// with no majority, or fewer than a quorum answering, are clear errors, never a guess.
TEST(StripedCount, RedlockMajorityRules) {
    auto redlock = redlock_client();
    const auto key_of = [&](const std::string& name) {
        return dlock::redis::client({.url = fleet()[0].url()}).lock_key(name) + ":record";
    };
    std::error_code ec;

    // A minority holding another value (written there by hand, as a raced first writer would):
    // the majority's value is the answer and is written back over it.
    const auto outvoted = unique_name("outvoted");
    fleet()[0].command({"SET", key_of(outvoted), "4"});
    fleet()[1].command({"SET", key_of(outvoted), "4"});
    fleet()[2].command({"SET", key_of(outvoted), "5"});
    EXPECT_EQ(redlock->record_once(outvoted, "5", ec), "4") << "the majority's value stays";
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(fleet()[2].command({"GET", key_of(outvoted)}), "4") << "written back";

    // A value on a minority only, the others empty (a first write that failed half-way, or what
    // restarts without data left of an agreed value): neither it nor the caller's value wins.
    const auto lone = unique_name("lone");
    fleet()[2].command({"SET", key_of(lone), "5"});
    (void)redlock->record_once(lone, "4", ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_NE(dlock::last_error_message(ec).find("\"5\""), std::string::npos)
        << dlock::last_error_message(ec);
    EXPECT_EQ(fleet()[0].command({"EXISTS", key_of(lone)}), "0") << "nothing written";

    // Split three ways: no value on a majority, and no call can make one.
    const auto split = unique_name("split");
    fleet()[0].command({"SET", key_of(split), "4"});
    fleet()[1].command({"SET", key_of(split), "5"});
    fleet()[2].command({"SET", key_of(split), "6"});
    (void)redlock->record_once(split, "4", ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    const auto why = dlock::last_error_message(ec);
    for (const auto* v : {"\"4\"", "\"5\"", "\"6\""})
        EXPECT_NE(why.find(v), std::string::npos) << why << " should name " << v;
    dlock::striped<dlock::mutex> s(*redlock, "split-" + split, 4);
    EXPECT_NO_THROW(s.verify()) << "another base name is unaffected";

    // One server down: two of three still record and read.
    const auto minority = unique_name("minority");
    fleet()[2].pause();
    EXPECT_EQ(redlock->record_once(minority, "8", ec), "8");
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(redlock->record_once(minority, "9", ec), "8");
    // Two down: fewer than a quorum answer.
    fleet()[1].pause();
    (void)redlock->record_once(minority, "8", ec);
    EXPECT_EQ(ec, dlock::errc::quorum_unreachable) << ec.message();
    fleet()[1].resume();
    fleet()[2].resume();
    // The server that missed the first write: the majority still rules, a new client with
    // another count is refused, and the call writes the value back to that server.
    auto other = redlock_client();
    EXPECT_EQ(other->record_once(minority, "9", ec), "8");
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(fleet()[2].command({"GET", key_of(minority)}), "8") << "written back";
}

// The count is checked at every grant of a stripe, not once per object: when the record says
// another count (every server lost it and a 16-stripe opener recorded 16), an object that
// verified 8 before is refused, holds nothing, and lock_all is refused the same way.
TEST(StripedCount, EveryGrantChecksTheRecordAgain) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto base = unique_name("stock");
    dlock::striped<dlock::mutex> eight(redis, base, 8, {.lease = 10s});
    { std::lock_guard held(eight.get("sku-1")); }  // verified: 8
    const auto record = redis.lock_key(base + "/#stripes") + ":record";
    redis.command({"SET", record, "16"});
    try {
        const bool held = eight.get("sku-1").try_lock();
        ADD_FAILURE() << "a stripe was granted on a record of 16 (held " << held << ")";
        if (held) eight.get("sku-1").unlock();
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("records 16"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(redis.inspect(eight.stripe_name(eight.stripe_of("sku-1"))).held)
        << "the refused grant was released";
    EXPECT_THROW((void)eight.lock_all({"sku-1", "sku-2"}), dlock::error);
    redis.command({"SET", record, "8"});
    EXPECT_TRUE(eight.get("sku-1").try_lock()) << "the same count works again";
    eight.get("sku-1").unlock();
}

TEST(Striped, FairAndSharedStripes) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::striped<dlock::fair_mutex> fair(redis, unique_name("fair"), 4, {.lease = 10s});
    { std::lock_guard held(fair.get("x")); }
    auto all = fair.lock_all({"x", "y", "z"});
    for (const auto& p : all->parts()) EXPECT_EQ(p.request.kind, dlock::lock_kind::fair);
}

#if DLOCK_HAS_ZOOKEEPER
dlock::zk::client zk_client() {
    return dlock::zk::client({.url = shared_zk().url("/dlock-striped"),
                              .session_timeout = 4s,
                              .connect_timeout = scaled(5s)});
}

TEST(StripedCount, RecordedOnZooKeeper) {
    auto zk = zk_client();
    expect_count_recorded(zk);
    expect_race_agrees([] { return std::make_unique<dlock::zk::client>(zk_client()); });
    // The record is a persistent node beside the lock nodes, outliving the session.
    const auto base = unique_name("persist");
    { dlock::striped<dlock::mutex>(zk, base, 3).verify(); }
    auto later = zk_client();
    dlock::striped<dlock::mutex> four(later, base, 4);
    EXPECT_THROW(four.verify(), dlock::error) << "the count outlived the first session";
}

TEST(StripedZk, StripesExclude) {
    auto zk = zk_client();
    const auto base = unique_name("stock");
    dlock::striped<dlock::mutex> a(zk, base, 4, {.lease = 10s});
    dlock::striped<dlock::mutex> b(zk, base, 4, {.lease = 10s});
    std::lock_guard held(a.get("sku-1"));
    EXPECT_FALSE(b.get("sku-1").try_lock());
    auto all = b.try_lock_all_for({"sku-1", "sku-2"}, 100ms);
    EXPECT_FALSE(all);
}
#endif  // DLOCK_HAS_ZOOKEEPER

}  // namespace
