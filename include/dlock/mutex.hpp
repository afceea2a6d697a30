// `dlock::mutex`: a distributed mutual-exclusion lock, Lockable and TimedLockable like
// std::timed_mutex, so std::unique_lock, std::scoped_lock and std::lock work with it. It is a thin
// adapter over a backend's lease: lock() acquires one, unlock() releases it.
//
// Sharing: like std::mutex, one object may be used by many threads of a process. The object holds
// at most one grant: while a thread owns it (from lock() until that thread's unlock(), even if the
// grant was lost meanwhile), another thread's lock() / try_lock_for() waits in the process for
// that unlock() before it competes for the distributed lock, and an unlock() only ever releases
// its caller's own grant. Not re-entrant: use recursive_mutex for that. The backend must outlive
// the mutex.
//
// Fork: a child process's copy of a locked mutex is inert (state() lost; its unlock() and
// destructor never touch the server); the parent keeps the lock (docs/lock-family.md, "fork").
//
// Note: std::unique_lock::owns_lock() means "lock() returned", not "the lease is still valid".
// Check state() / lost_token(), and pass fencing_token() to the protected resource.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include <dlock/backend.hpp>
#include <dlock/detail/deadline.hpp>
#include <dlock/detail/owner_gate.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>

namespace dlock {

class mutex {
public:
    /// Validates `options` and that `name` is not empty (errc::invalid_argument; the backend checks
    /// its own length limit on first use). Contacts no server.
    mutex(backend& backend, std::string name, lock_options options = {});
    mutex(const mutex&) = delete;
    mutex& operator=(const mutex&) = delete;
    /// Releases the lock if this mutex still holds it. Never throws.
    ~mutex();

    /// Blocks until the calling thread holds the lock: first until no other thread of this
    /// process owns this object, then for the distributed lock. Throws dlock::error if the
    /// backend fails (nothing is held then), if lock_options::max_attempts is reached
    /// (errc::attempts_exhausted), if lock_options::cancel fires (errc::canceled), or
    /// errc::invalid_argument if the calling thread owns this mutex already (that would wait for
    /// itself). Waiting is notification-driven; there is no hidden retry budget.
    void lock();

    /// One attempt. false when another thread of this process owns the object or someone else
    /// holds the lock; throws when it cannot tell, and like lock() when the caller owns it. On
    /// Redis a free lock with a live registered waiter is handed to that waiter, so it counts as
    /// held (docs/redis-lock.md, "Waking one waiter": nobody barges past a registered waiter).
    [[nodiscard]] bool try_lock();

    /// Waits at most `timeout` (negative counts as zero), for another thread of this process to
    /// unlock and then for the lock. false when it stayed held; throws as lock().
    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return try_lock_until_steady(detail::steady_deadline_after(timeout));
    }

    /// Waits until `deadline`, converted to steady_clock once on entry. A past deadline means one
    /// attempt.
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
        return try_lock_until_steady(detail::steady_deadline(deadline));
    }

    /// Releases the calling thread's grant (atomic compare-and-delete) and lets the next waiting
    /// thread in. Never throws: if the lease was already lost the failure goes to the client's
    /// error handler; no other owner's lock is touched. From a thread that does not own the
    /// object (std says: undefined behaviour) it releases nothing and reports errc::not_owner to
    /// the client's error handler (nothing at all when the object is not locked).
    void unlock() noexcept;

    /// The observers describe the object's current grant, whichever thread owns it.

    /// The fencing token of the current grant; throws errc::not_owner when not held.
    std::uint64_t fencing_token() const;
    /// Time left on the current grant; 0 when not held.
    std::chrono::milliseconds expires_in() const noexcept;
    /// State of the current grant; lost when not held.
    lock_state state() const noexcept;
    /// Fires when the current grant is lost or released; already fired when not held.
    std::stop_token lost_token() const noexcept;

    const std::string& name() const noexcept { return name_; }

private:
    bool try_lock_until_steady(std::chrono::steady_clock::time_point deadline);
    /// Owns the gate, then asks the backend. false on contention (when `contention_is_false`).
    bool lock_until(std::chrono::steady_clock::time_point deadline, bool contention_is_false);
    void adopt(lease&& grant);

protected:
    /// For the mutex-shaped members of the lock family (fair_mutex): the same adapter over
    /// another lock kind.
    mutex(backend& backend, std::string name, lock_options options, lock_request request);

private:
    backend& backend_;
    lock_request request_{};
    std::string name_;
    lock_options options_;
    detail::owner_gate gate_;            // the owning thread, from lock() to its unlock()
    mutable detail::mutex lease_mutex_;  // the owner's adopt may race observers
    lease lease_ DLOCK_GUARDED_BY(lease_mutex_);
};

/// `dlock::fair_mutex`: a mutex whose waiters are served strictly first come, first served, with
/// direct hand-off (Redisson's fair lock): unlock() makes the longest-waiting live waiter the
/// owner on the server and notifies only that waiter, which owns the lock without a further round
/// trip. Nobody barges in ahead of a queued waiter, and a release wakes one process, not all.
/// A waiter that gives up (timeout, cancel) leaves the queue; a waiter that crashed loses its
/// place within the backend's waiter liveness (2 s on Redis), and a hand-off to a waiter that
/// died meanwhile expires after the short hand-off lease (2 s). Same interface and contract as
/// dlock::mutex; a lock name is used either by mutexes or by fair mutexes, not both.
/// Backends: Redis single instance; ZooKeeper (its lock recipe is FIFO). Not Redlock
/// (errc::unsupported).
class fair_mutex : public mutex {
public:
    fair_mutex(backend& backend, std::string name, lock_options options = {})
        : mutex(backend, std::move(name), std::move(options), lock_request{lock_kind::fair}) {}
};

}  // namespace dlock
