// The etcd recipe's per-kind logic (src/etcd/recipe.hpp): the key of each kind, how keys read
// under a prefix become queue entries, the permits key, and the standing of each kind.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "etcd/recipe.hpp"

namespace {

using dlock::lock_kind;
using dlock::detail::queue_entry;
using dlock::detail::queue_role;
using namespace dlock::etcd::detail;

const std::string guid = "0123456789abcdef0123456789abcdef";
const std::string guid2 = "fedcba9876543210fedcba9876543210";

TEST(EtcdRecipe, KeysOfEachKind) {
    EXPECT_EQ(entry_key("n/", 0x694d, lock_kind::exclusive, 1, ""), "n/694d");
    EXPECT_EQ(entry_key("n/", 0x694d, lock_kind::reentrant, 1, ""), "n/694d");
    EXPECT_EQ(entry_key("n/", 0x694d, lock_kind::write, 1, ""), "n/694d");
    EXPECT_EQ(entry_key("n/", 0x694d, lock_kind::read, 1, guid), "n/694d-rd-" + guid);
    EXPECT_EQ(entry_key("n/", 0x694d, lock_kind::permits, 12, guid), "n/694d-pm12-" + guid);
    EXPECT_TRUE(key_per_lease(lock_kind::exclusive));
    EXPECT_TRUE(key_per_lease(lock_kind::fair));
    EXPECT_TRUE(key_per_lease(lock_kind::reentrant));
    EXPECT_TRUE(key_per_lease(lock_kind::write));
    EXPECT_FALSE(key_per_lease(lock_kind::read));
    EXPECT_FALSE(key_per_lease(lock_kind::permits));
}

TEST(EtcdRecipe, KeysBecomeEntries) {
    auto e = entry_of("n/", "n/694d-rd-" + guid, 7);
    EXPECT_EQ(e.role, queue_role::read);
    EXPECT_EQ(e.order, 7);
    EXPECT_EQ(e.id, "n/694d-rd-" + guid);
    e = entry_of("n/", "n/694d-pm12-" + guid, 8);
    EXPECT_EQ(e.role, queue_role::permits);
    EXPECT_EQ(e.count, 12u);
    // etcdctl lock's key, and anything else under the prefix: a writer.
    for (const std::string& key :
         {std::string("n/694d"), std::string("n/x/694d"), "n/694d-rd-" + guid.substr(1),
          "n/694D-rd-" + guid, "n/694d-pm0-" + guid, "n/694d-pm012-" + guid, "n/694d-pm-" + guid,
          "n/694d-pmx-" + guid, "n/-rd-" + guid, "n/694d-xx-" + guid}) {
        EXPECT_EQ(entry_of("n/", key, 1).role, queue_role::write) << key;
    }
}

TEST(EtcdRecipe, PermitsKeyIsOutsideEveryLocksRange) {
    etcd_endpoint plain{{"h:2379"}, ""};
    EXPECT_EQ(permits_key(plain, "ab"), "/dlock-permits-6162");
    etcd_endpoint prefixed{{"h:2379"}, "app/"};
    EXPECT_EQ(permits_key(prefixed, "a/"), "app//dlock-permits-612f");
    // Not under the prefix of lock "ab", nor of any lock whose name it could start with.
    EXPECT_NE(permits_key(plain, "ab").rfind(key_prefix(plain, "ab"), 0), 0u);
    EXPECT_EQ(parse_permits("3"), 3u);
    EXPECT_EQ(parse_permits("4294967295"), 4294967295u);
    for (const char* bad : {"", "0", "-1", "4294967296", "3 ", "x"})
        EXPECT_FALSE(parse_permits(bad)) << bad;
}

TEST(EtcdRecipe, StandingsPerKind) {
    const std::vector<queue_entry> locks = {entry_of("n/", "n/1", 5),
                                            entry_of("n/", "n/2-rd-" + guid, 6),
                                            entry_of("n/", "n/3-rd-" + guid2, 7)};
    auto st = locate(lock_kind::exclusive, locks, "n/1", 0);
    EXPECT_TRUE(st.holds);
    st = locate(lock_kind::read, locks, "n/3-rd-" + guid2, 0);
    EXPECT_FALSE(st.holds);
    EXPECT_EQ(st.watch, "n/1") << "a reader watches the nearest earlier writer";
    EXPECT_FALSE(st.watch_all);
    st = locate(lock_kind::permits, locks, "n/1", 1);
    EXPECT_TRUE(st.clash) << "a semaphore on a lock's keys";

    const std::vector<queue_entry> sem = {entry_of("n/", "n/1-pm2-" + guid, 5),
                                          entry_of("n/", "n/2-pm1-" + guid, 6),
                                          entry_of("n/", "n/3-pm1-" + guid2, 7)};
    st = locate(lock_kind::permits, sem, "n/1-pm2-" + guid, 2);
    EXPECT_TRUE(st.holds);
    EXPECT_TRUE(st.wake_successor);
    st = locate(lock_kind::permits, sem, "n/2-pm1-" + guid, 2);
    EXPECT_FALSE(st.holds);
    EXPECT_TRUE(st.watch_all) << "first in line: any release or a new number of permits";
    st = locate(lock_kind::permits, sem, "n/3-pm1-" + guid2, 2);
    EXPECT_FALSE(st.watch_all);
    EXPECT_EQ(st.watch, "n/2-pm1-" + guid);
    st = locate(lock_kind::exclusive, sem, "n/9", 0);
    EXPECT_TRUE(st.clash) << "a lock on a semaphore's keys";
    EXPECT_STREQ(other_kind(lock_kind::exclusive), "counting_semaphore");
    EXPECT_STREQ(other_kind(lock_kind::permits), "lock");
}

}  // namespace
