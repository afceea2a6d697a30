// The queue rules over ordered entries (src/core/queue_locate.hpp) that the ZooKeeper and etcd
// recipes share: the exclusive, read and permits rules, and the view of holders and waiters.
#include "core/queue_locate.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using dlock::detail::locate_in_queue;
using dlock::detail::queue_entry;
using dlock::detail::queue_role;
using dlock::detail::view_queue;

queue_entry w(std::int64_t order, std::string id) {
    return {order, queue_role::write, 1, std::move(id)};
}
queue_entry r(std::int64_t order, std::string id) {
    return {order, queue_role::read, 1, std::move(id)};
}
queue_entry p(std::int64_t order, std::uint64_t count, std::string id) {
    return {order, queue_role::permits, count, std::move(id)};
}

TEST(QueueLocate, WriterWatchesItsImmediatePredecessor) {
    const std::vector<queue_entry> q = {w(12, "c"), w(10, "a"), r(11, "b")};
    auto at = locate_in_queue(q, "a", 0);
    EXPECT_TRUE(at.found);
    EXPECT_TRUE(at.holds);
    at = locate_in_queue(q, "c", 0);
    EXPECT_FALSE(at.holds);
    EXPECT_EQ(at.watch, "b");
    at = locate_in_queue(q, "d", 0);
    EXPECT_FALSE(at.found);
}

TEST(QueueLocate, ReaderWaitsOnlyForEarlierWriters) {
    const std::vector<queue_entry> q = {r(1, "a"), r(2, "b"), w(3, "c"), r(4, "d")};
    EXPECT_TRUE(locate_in_queue(q, "a", 0).holds);
    EXPECT_TRUE(locate_in_queue(q, "b", 0).holds) << "readers share";
    auto at = locate_in_queue(q, "d", 0);
    EXPECT_FALSE(at.holds);
    EXPECT_EQ(at.watch, "c") << "the nearest earlier writer, not the reader before";
    at = locate_in_queue(q, "c", 0);
    EXPECT_FALSE(at.holds);
    EXPECT_EQ(at.watch, "b");
}

TEST(QueueLocate, ReaderBehindAHoldingWriterWaits) {
    // A reader never holds beside a writer ahead of it, whatever its place.
    const std::vector<queue_entry> q = {w(5, "w"), r(6, "r1"), r(9, "r2")};
    for (const auto* id : {"r1", "r2"}) {
        const auto at = locate_in_queue(q, id, 0);
        EXPECT_FALSE(at.holds) << id;
        EXPECT_EQ(at.watch, "w") << id;
    }
}

TEST(QueueLocate, TheWatchedEntryIsLastWhenNothingElseIsAhead) {
    // A writer: only when its predecessor is first.
    const std::vector<queue_entry> q = {w(1, "a"), w(2, "b"), w(3, "c")};
    EXPECT_TRUE(locate_in_queue(q, "b", 0).watch_is_last);
    EXPECT_FALSE(locate_in_queue(q, "c", 0).watch_is_last) << "a is ahead of b";
    EXPECT_FALSE(locate_in_queue(q, "a", 0).watch_is_last) << "holds: watches nothing";
    // A reader: only when the writer it watches is the only writer ahead (readers share).
    const std::vector<queue_entry> rq = {r(1, "r0"), w(2, "w1"), r(3, "r1"), w(4, "w2"),
                                         r(5, "r2")};
    EXPECT_TRUE(locate_in_queue(rq, "r1", 0).watch_is_last);
    EXPECT_FALSE(locate_in_queue(rq, "r2", 0).watch_is_last) << "w1 is ahead of w2";
    EXPECT_FALSE(locate_in_queue(rq, "w2", 0).watch_is_last) << "w1 is ahead of r1";
    // Permits never: their rule is a running sum.
    const std::vector<queue_entry> pq = {p(1, 2, "p1"), p(2, 2, "p2"), p(3, 1, "p3")};
    EXPECT_FALSE(locate_in_queue(pq, "p3", 2).watch_is_last);
}

TEST(QueueLocate, FurtherBackTheEntryBeforeTheWatchedOneIsLookedAgainOn) {
    // A writer: the entry before its predecessor; none when the predecessor is last.
    const std::vector<queue_entry> q = {w(1, "a"), r(2, "b"), w(3, "c"), w(4, "d")};
    EXPECT_EQ(locate_in_queue(q, "d", 0).refresh, "b");
    EXPECT_EQ(locate_in_queue(q, "c", 0).refresh, "a");
    EXPECT_EQ(locate_in_queue(q, "b", 0).refresh, "") << "a is the last one ahead";
    EXPECT_EQ(locate_in_queue(q, "a", 0).refresh, "") << "holds";
    // A reader: the nearest writer before the one it watches (the readers between share).
    const std::vector<queue_entry> rq = {w(1, "w0"), r(2, "r0"), w(3, "w1"),
                                         r(4, "r1"), w(5, "w2"), r(6, "r2")};
    EXPECT_EQ(locate_in_queue(rq, "r2", 0).refresh, "w1");
    EXPECT_EQ(locate_in_queue(rq, "r1", 0).refresh, "w0");
    EXPECT_EQ(locate_in_queue(rq, "r0", 0).refresh, "") << "w0 is the only writer ahead";
    // Once the entry looked again on is gone, the watched one is the last one ahead.
    const std::vector<queue_entry> after = {r(2, "b"), w(3, "c"), w(4, "d")};
    EXPECT_EQ(locate_in_queue(after, "d", 0).watch, "c");
    EXPECT_FALSE(locate_in_queue(after, "d", 0).watch_is_last) << "b is still ahead of c";
    const std::vector<queue_entry> later = {w(3, "c"), w(4, "d")};
    EXPECT_TRUE(locate_in_queue(later, "d", 0).watch_is_last);
    // Permits never: their rule is a running sum.
    const std::vector<queue_entry> pq = {p(1, 2, "p1"), p(2, 2, "p2"), p(3, 1, "p3")};
    EXPECT_EQ(locate_in_queue(pq, "p3", 2).refresh, "");
}

TEST(QueueLocate, PermitsRunningSumInQueueOrder) {
    const std::vector<queue_entry> q = {p(1, 1, "a"), p(2, 2, "b"), p(3, 2, "c"), p(4, 1, "d")};
    EXPECT_TRUE(locate_in_queue(q, "a", 3).holds);
    auto at = locate_in_queue(q, "b", 3);
    EXPECT_TRUE(at.holds);
    EXPECT_TRUE(at.has_successor);
    at = locate_in_queue(q, "c", 3);
    EXPECT_FALSE(at.holds);
    EXPECT_TRUE(at.first_waiter) << "every earlier entry holds: watch them all";
    at = locate_in_queue(q, "d", 3);
    EXPECT_FALSE(at.holds) << "1 permit would fit only by passing the waiter ahead";
    EXPECT_FALSE(at.first_waiter);
    EXPECT_EQ(at.watch, "c");
    EXPECT_FALSE(at.has_successor);
    EXPECT_TRUE(locate_in_queue(q, "d", 6).holds);
    at = locate_in_queue({p(1, 5, "a")}, "a", 3);
    EXPECT_TRUE(at.first_waiter) << "more than the limit: waits for a new number of permits";
}

TEST(QueueLocate, FamiliesAreApart) {
    // Lock entries do not count in a semaphore's sum, nor permits entries in a lock's queue (a
    // backend refuses the mix; the rules ignore the other family).
    const std::vector<queue_entry> q = {w(1, "w"), p(2, 1, "p"), r(3, "r")};
    EXPECT_TRUE(locate_in_queue(q, "p", 1).holds);
    const auto at = locate_in_queue(q, "r", 0);
    EXPECT_FALSE(at.holds);
    EXPECT_EQ(at.watch, "w");
}

TEST(QueueView, LockEntries) {
    // Two readers, then a writer waiting, then a reader behind it (writer preference).
    const auto v = view_queue({w(3, "c"), r(1, "a"), r(2, "b"), r(4, "d")}, 0);
    EXPECT_EQ(v.readers, 2u);
    EXPECT_FALSE(v.writer);
    EXPECT_EQ(v.lock_waiters, 2u);
    EXPECT_TRUE(v.any_read);
    EXPECT_EQ(v.holding, (std::vector<std::string>{"a", "b"}));

    const auto x = view_queue({w(7, "b"), w(5, "a")}, 0);
    EXPECT_TRUE(x.writer);
    EXPECT_EQ(x.lock_waiters, 1u);
    EXPECT_EQ(x.holding, std::vector<std::string>{"a"});
}

TEST(QueueView, PermitsEntries) {
    // limit 3: 2 + 1 hold, the next 1 waits (first come first served, also behind a big one).
    const auto v = view_queue({p(1, 2, "a"), p(2, 1, "b"), p(3, 1, "c")}, 3);
    EXPECT_EQ(v.permit_holders, 2u);
    EXPECT_EQ(v.permits_in_use, 3u);
    EXPECT_EQ(v.permit_waiters, 1u);
    const auto x = view_queue({p(1, 5, "a"), p(2, 1, "b")}, 3);
    EXPECT_EQ(x.permit_holders, 0u);
    EXPECT_EQ(x.permit_waiters, 2u);
}

}  // namespace
