// The queue rules shared by the backends whose locks are ordered entries (docs/zookeeper.md,
// docs/etcd.md): ZooKeeper's sequential nodes ordered by sequence number, etcd's keys ordered
// by create revision. Given the entries of one lock name, the decision "do we hold, and if not,
// which entry do we watch", and the view of who holds and who waits (backend::inspect). Free of
// I/O: each backend parses its nodes or keys into queue_entry values and acts on the answer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::detail {

/// What an entry asks for. write: the exclusive rule (dlock::mutex, fair_mutex,
/// recursive_mutex and a shared_mutex writer all queue as writers); read: a shared_mutex reader;
/// permits: `count` permits of a counting_semaphore.
enum class queue_role : std::uint8_t { read, write, permits };

struct queue_entry {
    std::int64_t order = 0;  ///< the server's order: a sequence number, a create revision
    queue_role role = queue_role::write;
    std::uint64_t count = 1;  ///< permits: how many it takes
    std::string id{};         ///< how the backend names it (a child's name, a key)
};

struct queue_position {
    bool found = false;          ///< our entry is among the entries
    bool holds = false;          ///< it holds the lock (or its permits)
    bool has_successor = false;  ///< permits: an entry follows ours (it may watch us)
    /// permits, !holds: every earlier permits entry holds, so what frees our turn is any release
    /// or a new number of permits: watch all of them (and the limit), not one predecessor.
    bool first_waiter = false;
    std::string watch{};  ///< !holds && !first_waiter: the id of the entry to watch
    /// read and write, !holds: `watch` is the only entry that keeps ours from holding. Orders only
    /// grow, so no entry is ever placed before ours: once `watch` is gone, ours holds.
    bool watch_is_last = false;
    /// read and write, !holds && !watch_is_last: the entry whose going can leave `watch` the last
    /// one ahead of ours (for a write entry the one before `watch`, for a read entry the nearest
    /// write entry before `watch`). A waiter that watches it too looks again while `watch` is
    /// still there, so that `watch` going later is its grant with nothing more to read.
    std::string refresh{};
};

/// Where the entry with id `ours` stands among `entries` (any order; sorted here by `order`).
/// A read or write entry is placed among the read and write entries only: a write entry holds
/// when it is first and watches its immediate predecessor; a read entry holds when no write
/// entry is before it and watches the nearest earlier write entry. A permits entry is placed
/// among the permits entries only: in order, entries hold while the running sum of their counts
/// stays <= `limit` and every earlier one holds (strictly first come, first served); a waiter
/// whose predecessor waits too watches that predecessor.
queue_position locate_in_queue(std::vector<queue_entry> entries, std::string_view ours,
                               std::uint64_t limit);

/// Who holds and who waits among `entries`, by the rules of locate_in_queue().
struct queue_view {
    std::uint32_t readers = 0;           ///< read entries that hold
    bool writer = false;                 ///< a write entry holds
    std::uint32_t lock_waiters = 0;      ///< read and write entries that wait
    bool any_read = false;               ///< a read entry is among the entries
    std::uint32_t permit_holders = 0;    ///< permits entries that hold
    std::uint64_t permits_in_use = 0;    ///< the permits they hold
    std::uint32_t permit_waiters = 0;    ///< permits entries that wait
    std::vector<std::string> holding{};  ///< the ids of the holding entries, in order
};

/// `limit`: the semaphore's number of permits (ignored without permits entries).
queue_view view_queue(std::vector<queue_entry> entries, std::uint64_t limit);

}  // namespace dlock::detail
