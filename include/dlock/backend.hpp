// `dlock::backend`: what a lock service (Redis, Redlock, ZooKeeper, etcd) offers to the
// backend-neutral lock types. Users get one from a backend's client (dlock::redis::client, ...)
// and pass it to dlock::mutex; they rarely call it directly except through acquire().
//
// Sharing: every backend is thread-safe; one client per process serves all threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/config.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>

namespace dlock {

/// Which member of the lock family a grant belongs to. One name is used by one kind only: two
/// kinds are never granted on one name at once. On Redis and Redlock the kinds keep different
/// server-side state, and an acquire answers errc::unexpected_reply when a name's state belongs
/// to another kind. On ZooKeeper and etcd the lock kinds (exclusive, reentrant, fair, read, write)
/// share one queue of nodes (keys), so another lock kind waits its turn like any waiter; a lock
/// kind and a counting_semaphore on one name answer errc::unexpected_reply (docs/lock-family.md).
enum class lock_kind : std::uint8_t {
    exclusive,  ///< dlock::mutex: one holder
    reentrant,  ///< dlock::recursive_mutex: one owner, who may take it again
    fair,       ///< dlock::fair_mutex: one holder, waiters served first come first served
    read,       ///< dlock::shared_mutex, shared side: many readers while no writer
    write,      ///< dlock::shared_mutex, exclusive side: one writer, no readers
    permits,    ///< dlock::counting_semaphore: up to a set number of permits held at once
};

const char* to_string(lock_kind kind) noexcept;

/// What to acquire: the kind and its parameters. The default is a plain exclusive lock.
struct lock_request {
    lock_kind kind = lock_kind::exclusive;
    /// permits: how many permits to take at once (>= 1). Ignored by the other kinds.
    std::uint32_t count = 1;
    /// permits: the semaphore's number of permits, set on the server by the first acquire when
    /// none is set yet (later changes go through set_permits()). Must be >= count.
    std::uint32_t limit = 1;
    /// reentrant: a live lease of the same owner on the same lock. The grant re-enters it (same
    /// owner, same fencing token, one more level) without competing; releasing the returned lease
    /// leaves one level. Null: a new owner competes for the lock. Every backend answers the same
    /// when it names anything else (another client's lease, another lock's, an empty or a
    /// released one): errc::not_owner, nothing taken; errc::lock_lost when it names this owner's
    /// grant but the server no longer holds it; errc::invalid_argument when the kind is not
    /// reentrant.
    const lease* reenter = nullptr;
};

/// The lock type whose state a name has on the server (lock_info::type).
enum class lock_type : std::uint8_t {
    none,                ///< no lock state: free and nobody waits (a fence counter may remain)
    mutex,               ///< dlock::mutex
    recursive_mutex,     ///< dlock::recursive_mutex
    fair_mutex,          ///< dlock::fair_mutex
    shared_mutex,        ///< dlock::shared_mutex (readers or a writer, waiting writers)
    counting_semaphore,  ///< dlock::counting_semaphore
    /// One exclusive lock whose exact type the server cannot tell: ZooKeeper keeps dlock::mutex,
    /// fair_mutex, recursive_mutex and a shared_mutex writer as the same kind of node.
    exclusive,
    foreign,  ///< something dlock did not write is stored under the name; lock_info::detail says
              ///< what
};

/// "dlock::mutex", ..., "none", "exclusive", "foreign".
const char* to_string(lock_type type) noexcept;

/// What a backend knows about lock `name` at one instant (backend::inspect): a snapshot taken
/// in one atomic read per server (one Lua script on Redis, one getChildren on ZooKeeper), already
/// stale when it arrives. For inspection and tools, never for deciding who may write: only a
/// grant's fencing token does that.
struct lock_info {
    std::string name{};
    lock_type type = lock_type::none;
    /// Someone holds it: a live holder, reader share or permit grant.
    bool held = false;
    /// Live grants: 1 for a held exclusive lock (whatever its re-entry depth), the reader shares
    /// of a shared_mutex, the grants of a semaphore (one grant may hold several permits).
    std::uint32_t holders = 0;
    /// shared_mutex: live reader shares; `writer` when a writer holds it.
    std::uint32_t readers = 0;
    bool writer = false;
    /// recursive_mutex: the owner's re-entry depth (0 when free). ZooKeeper keeps depth in the
    /// owner's process, so it reports 1 there.
    std::uint32_t depth = 0;
    /// counting_semaphore: permits held by live grants, and the number of permits set on the
    /// server (unset when none was set yet).
    std::uint32_t permits_in_use = 0;
    std::optional<std::uint32_t> permit_limit{};
    /// Live waiters queued on the server: fair_mutex waiters and a shared_mutex's waiting writers
    /// on Redis (a dead waiter's entry does not count), every waiting node on ZooKeeper (readers,
    /// writers, semaphore acquirers). A dlock::mutex, recursive_mutex or semaphore waiter on Redis
    /// does not queue: it listens for the release; see `subscribers`.
    std::uint32_t waiters = 0;
    /// Redis: client connections subscribed to the name's release channel (a process's waiters
    /// share one); 0 elsewhere.
    std::uint32_t subscribers = 0;
    /// The last fencing token handed out for the name (Redis: its fence counter), or, on
    /// ZooKeeper, the largest token among the current holders (their nodes' czxid); unset when
    /// there is none.
    std::optional<std::uint64_t> fencing_counter{};
    /// The shortest lease left among the holders: the latest the name (or, for shared kinds, one
    /// share) frees itself without a release. Unset when free, and on ZooKeeper (a holder's lease
    /// is its session: it lasts while the holder is alive).
    std::optional<std::chrono::milliseconds> lease_left{};
    /// type == foreign: what was found (e.g. "key dlock:{a} is a list"); empty otherwise.
    std::string detail{};

    /// Several servers (Redlock): `held`, `type`, the counts and `lease_left` are what a quorum
    /// of `quorum` servers agree on (held on at least quorum servers; lease_left the quorum-th
    /// longest); fencing_counter, waiters and subscribers are the largest on any server. `servers`
    /// has each server's own view, in the client's order, with `server` and `error` set. Empty
    /// for one server.
    std::vector<lock_info> servers{};
    std::size_t quorum = 1;
    std::size_t held_on = 0;  ///< servers on which it is held
    /// In `servers`: the server ("host:port") and, when it could not be read, why (its other
    /// fields are then unset).
    std::string server{};
    std::string error{};
};

/// The longest value backend::record_once stores, in bytes.
inline constexpr std::size_t max_record_size = 1024;

/// Change notifications for one lock name, made by backend::watch(). Used by one thread at a
/// time; destroying it unsubscribes. Must not outlive the backend that made it.
class lock_watch {
public:
    virtual ~lock_watch() = default;

    /// Sleeps until the server reported that the lock's state may have changed since the watch
    /// was made or since the last call that returned true, or until `deadline`. True: changed
    /// (possibly spuriously: a write that left the state as it was, or a reconnect after which
    /// changes may have been missed); false: `deadline` passed and nothing was reported. When
    /// the server cannot be reached it returns true with `ec` set; the next call reconnects.
    /// Callers re-read the state with backend::inspect() after each true.
    virtual bool wait_until(std::chrono::steady_clock::time_point deadline,
                            std::error_code& ec) noexcept = 0;
};

class backend {
public:
    virtual ~backend() = default;

    /// Takes the lock `name` of kind `request.kind`, waiting while others hold it until `deadline`
    /// (a past deadline means exactly one attempt). Returns the grant; on failure returns an empty
    /// lease and sets `ec`: errc::timeout / attempts_exhausted when the lock stayed held by someone
    /// else, errc::unsupported when this backend lacks the kind, another errc when the backend
    /// failed. Waiting is notification-driven (no polling). `options.wait` is ignored here: the
    /// deadline is the bound.
    [[nodiscard]] virtual lease acquire_until(std::string_view name, const lock_request& request,
                                              const lock_options& options,
                                              std::chrono::steady_clock::time_point deadline,
                                              std::error_code& ec) noexcept = 0;

    /// The exclusive lock: acquire_until(name, lock_request{}, options, deadline, ec).
    [[nodiscard]] lease acquire_until(std::string_view name, const lock_options& options,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::error_code& ec) noexcept {
        return acquire_until(name, lock_request{}, options, deadline, ec);
    }

    /// Administrative: sets the number of permits of semaphore `name` (>= 1), whether or not it
    /// was set before. Permits already held stay held; if more are held than the new number,
    /// acquirers wait until enough are released. errc::unsupported when the backend has no
    /// semaphore. Throws dlock::error; the twin sets `ec`.
    void set_permits(std::string_view name, std::uint32_t permits);
    virtual void set_permits(std::string_view name, std::uint32_t permits,
                             std::error_code& ec) noexcept;

    /// What the server(s) know about lock `name` right now, whichever kind uses it, without
    /// changing anything (lock_info). Throws dlock::error: errc::unsupported when the backend
    /// cannot inspect, another errc when it failed (Redlock: fewer than a quorum of servers
    /// answered). The twin sets `ec` and returns an empty lock_info.
    [[nodiscard]] lock_info inspect(std::string_view name);
    [[nodiscard]] virtual lock_info inspect(std::string_view name, std::error_code& ec) noexcept;

    /// Subscribes to changes of lock `name` (for live views such as `dlock status --watch`):
    /// once watch() returns, each change of the name's server-side state (acquire, release,
    /// hand-off, a waiter queuing or leaving, a renewal, a lease expiring on the server) makes
    /// lock_watch::wait_until() return true; no state is polled. Redis and Redlock: server-
    /// assisted invalidation (CLIENT TRACKING BCAST on the name's keys, Redis 6 or later, no
    /// server configuration needed); a server that refuses it is watched on the release channel
    /// only, and wait_until() then also returns true once a second. ZooKeeper: a child watch on
    /// the lock node. docs/cli.md (dlock status --watch) lists what each backend sees. Returns
    /// null and sets `ec` on failure; errc::unsupported by default.
    [[nodiscard]] virtual std::unique_ptr<lock_watch> watch(std::string_view name,
                                                            std::error_code& ec) noexcept;

    /// Small settings every process must agree on (dlock::striped's stripe count): stores `value`
    /// under `name` if nothing is stored there yet, and returns what is stored (`value`, or what
    /// an earlier call stored). Never expires; two first users racing with different values get
    /// the same one back. `name` obeys the backend's lock-name rules (it lives beside the lock
    /// names: Redis and Redlock the key "<prefix>:{<name>}:record", ZooKeeper the persistent node
    /// "<base>/<encoded name>%record"); `value` is 1 to max_record_size bytes
    /// (errc::invalid_argument). Redlock: the value a majority of all servers stores
    /// (docs/redlock.md). errc::unsupported when the backend has no such store (the default).
    virtual std::string record_once(std::string_view name, std::string_view value,
                                    std::error_code& ec) noexcept;

    /// Takes the lock `name`, blocking up to `options.wait`. Throws dlock::error: errc::timeout
    /// when the wait bound passed while the lock was held by someone else, another errc when the
    /// backend failed. Nothing is held after a throw.
    [[nodiscard]] lease acquire(std::string_view name, const lock_options& options = {});
    /// The non-throwing twin of acquire(); returns an empty lease and sets `ec` on failure.
    [[nodiscard]] lease acquire(std::string_view name, const lock_options& options,
                                std::error_code& ec) noexcept;
    /// acquire() for any lock kind (a fair lock, a read lock, k permits, ...).
    [[nodiscard]] lease acquire(std::string_view name, const lock_request& request,
                                const lock_options& options);
    [[nodiscard]] lease acquire(std::string_view name, const lock_request& request,
                                const lock_options& options, std::error_code& ec) noexcept;
};

}  // namespace dlock
