// The etcd lock recipe's per-kind logic, free of I/O (docs/etcd.md, "Kinds"): the key each kind
// puts under a lock's key prefix, how a key read back under that prefix becomes an entry of the
// shared queue rules (core/queue_locate.hpp: create revisions order the entries), where a
// semaphore keeps its number of permits, and the decision "do we hold, and if not, what do we
// watch" for every kind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/backend.hpp>

#include "core/queue_locate.hpp"
#include "etcd/url.hpp"

namespace dlock::etcd::detail {

/// True for the kinds whose key is etcdctl lock's own, one per etcd lease and lock
/// (exclusive, fair, reentrant, write): two acquires of such a name by one client take turns
/// inside the client. read and permits put a key of their own per acquire.
bool key_per_lease(lock_kind kind) noexcept;

/// The key an acquire of `kind` puts under `key_prefix` with the client's etcd lease `lease_id`:
/// queue_key() for the kinds of key_per_lease(); "<queue_key>-rd-<guid>" for read;
/// "<queue_key>-pm<count>-<guid>" for permits (`guid`: 32 lower-case hex digits, one per acquire).
std::string entry_key(std::string_view key_prefix, std::int64_t lease_id, lock_kind kind,
                      std::uint32_t count, std::string_view guid);

/// A key read under `key_prefix`, with its create revision, as a queue entry. A read or permits
/// key of entry_key()'s shape is a read or permits entry; every other key (etcdctl lock's, a Go
/// concurrency.Mutex's, dlock's exclusive kinds', anything else someone put there) is a write
/// entry, so it excludes dlock's readers as it excludes writers.
dlock::detail::queue_entry entry_of(std::string_view key_prefix, std::string key,
                                    std::int64_t create_revision);

/// Where semaphore `name` keeps its number of permits: "<url prefix>/dlock-permits-<name in
/// hex>", outside every lock's key range (its only '/' comes right after the URL's prefix, as
/// with records), put without a lease.
std::string permits_key(const etcd_endpoint& endpoint, std::string_view name);

/// The number of permits stored in a permits key: a decimal number in [1, 2^32); nullopt for
/// anything else.
std::optional<std::uint32_t> parse_permits(std::string_view value);

/// Where our key stands among the entries under the prefix, for the engine's one acquire loop.
struct standing {
    bool clash = false;  ///< another kind's entries are there: a name serves one kind
    bool found = false;  ///< our key is among the entries
    bool holds = false;  ///< it holds the lock (or its permits)
    /// holds, and a semaphore entry follows ours: it may watch our key, so a put of our key
    /// (same lease, same create revision) tells it to look again.
    bool wake_successor = false;
    /// !holds: the first semaphore waiter waits for any release under the prefix and for a new
    /// number of permits (the permits key), not for one key.
    bool watch_all = false;
    std::string watch{};  ///< !holds && !watch_all: the key whose deletion (or put) we wait for
};

/// Where our key `ours` (of an acquire of `kind`) stands among `entries`; `limit` is the
/// semaphore's number of permits (ignored by the lock kinds). The lock kinds share one queue
/// (read entries, and write entries for every other lock kind) and clash with permits entries;
/// permits entries clash with every other entry.
standing locate(lock_kind kind, const std::vector<dlock::detail::queue_entry>& entries,
                std::string_view ours, std::uint64_t limit);

/// For messages: the kind whose entries a `kind` acquire clashed with.
const char* other_kind(lock_kind kind) noexcept;

}  // namespace dlock::etcd::detail
