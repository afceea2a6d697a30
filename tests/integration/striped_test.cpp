// dlock::striped<Lock> on a real redis-server (and ZooKeeper): the fixed key -> stripe hash, stripe
// names and their Redis Cluster slots, exclusion per stripe, lock_all's all-or-nothing with one
// deadline, and the stripe count recorded at first use (docs/granularity.md).
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/striped.hpp>
#include <dlock/zk/client.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shared_redis.hpp"
#include "test_env.hpp"
#include "zk_server.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::shared_zk;
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

TEST(Striped, StripeCountIsRecordedAtFirstUse) {
    dlock::redis::client redis({.url = shared_redis().url()});
    const auto base = unique_name("stock");
    dlock::striped<dlock::mutex> eight(redis, base, 8);
    std::lock_guard held(eight.get("sku-1"));  // first use: records 8
    dlock::striped<dlock::mutex> sixteen(redis, base, 16);
    try {
        (void)sixteen.get("sku-1");
        FAIL() << "another stripe count was accepted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::invalid_argument);
        const std::string what = e.what();
        EXPECT_NE(what.find("opened with 16 stripes"), std::string::npos) << what;
        EXPECT_NE(what.find("records 8"), std::string::npos) << what;
    }
    EXPECT_THROW((void)sixteen.lock_all({"a", "b"}), dlock::error);
    dlock::striped<dlock::mutex> again(redis, base, 8);
    EXPECT_NO_THROW((void)again.get("sku-2"));
    std::error_code ec;
    EXPECT_EQ(redis.record_once(base + "/#stripes", "99", ec), "8");
    EXPECT_FALSE(ec);
}

TEST(Striped, FairAndSharedStripes) {
    dlock::redis::client redis({.url = shared_redis().url()});
    dlock::striped<dlock::fair_mutex> fair(redis, unique_name("fair"), 4, {.lease = 10s});
    { std::lock_guard held(fair.get("x")); }
    auto all = fair.lock_all({"x", "y", "z"});
    for (const auto& p : all->parts()) EXPECT_EQ(p.request.kind, dlock::lock_kind::fair);
}

TEST(StripedZk, StripesExcludeWithoutACountRecord) {
    dlock::zk::client zk({.url = shared_zk().url("/dlock-striped"),
                          .session_timeout = 4s,
                          .connect_timeout = scaled(5s)});
    const auto base = unique_name("stock");
    dlock::striped<dlock::mutex> a(zk, base, 4, {.lease = 10s});
    dlock::striped<dlock::mutex> b(zk, base, 4, {.lease = 10s});
    std::lock_guard held(a.get("sku-1"));
    EXPECT_FALSE(b.get("sku-1").try_lock());
    auto all = b.try_lock_all_for({"sku-1", "sku-2"}, 100ms);
    EXPECT_FALSE(all);
}

}  // namespace
