// The Redis lock kinds' protocol table (src/redis/protocol.cpp): every kind of the family is in
// this build with all its scripts embedded, queued kinds have a leave script, and every script
// carries the header the calling convention asks for. No server.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "redis/protocol.hpp"

namespace {

using dlock::lock_kind;
using dlock::redis::detail::protocol_for;

constexpr lock_kind all_kinds[] = {lock_kind::exclusive, lock_kind::reentrant, lock_kind::fair,
                                   lock_kind::read,      lock_kind::write,     lock_kind::permits};

TEST(RedisProtocol, EveryKindIsBuiltWithItsScripts) {
    for (const auto kind : all_kinds) {
        SCOPED_TRACE(dlock::to_string(kind));
        const auto* p = protocol_for(kind);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(p->kind, kind);
        for (const auto* s : {p->acquire, p->release, p->renew}) {
            ASSERT_NE(s, nullptr);
            EXPECT_FALSE(s->source.empty());
            EXPECT_EQ(s->sha1.size(), 40u);
            EXPECT_TRUE(s->source.starts_with("--")) << s->name << " has no header comment";
        }
        // The exclusive kind's registered waiters leave too (docs/redis-lock.md, "Waking one
        // waiter").
        EXPECT_EQ(p->queued || kind == lock_kind::exclusive, p->leave != nullptr)
            << "queued kinds and registered mutex waiters, and only they, leave";
        // The fence counter is the second key of every kind (the engine and tools rely on it).
        ASSERT_FALSE(p->key_suffixes.empty());
        EXPECT_EQ(p->key_suffixes.front(), ":fence");
    }
}

TEST(RedisProtocol, OnlyTheFairAndWriteKindsQueue) {
    EXPECT_TRUE(protocol_for(lock_kind::fair)->queued);
    EXPECT_TRUE(protocol_for(lock_kind::write)->queued);
    EXPECT_FALSE(protocol_for(lock_kind::exclusive)->queued);
    EXPECT_FALSE(protocol_for(lock_kind::read)->queued);
}

// acquire.lua, release.lua and mutex_leave.lua address the mutex waiters' keys by position
// (KEYS[3..5]; docs/redis-lock.md, "Waking one waiter").
TEST(RedisProtocol, TheMutexKeysAreTheFenceAndTheWaitersQueue) {
    const auto* p = protocol_for(lock_kind::exclusive);
    ASSERT_NE(p, nullptr);
    const std::vector<std::string_view> expected{":fence", ":mutex_waiters", ":mutex_alive",
                                                 ":mutex_arrivals"};
    EXPECT_EQ(p->key_suffixes, expected);
    ASSERT_NE(p->leave, nullptr);
    EXPECT_EQ(p->leave->name, "mutex_leave");
}

TEST(RedisProtocol, UnknownKindHasNoProtocol) {
    EXPECT_EQ(protocol_for(static_cast<lock_kind>(200)), nullptr);
}

}  // namespace
