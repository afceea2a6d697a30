// `dlock::mutex`: a distributed mutual-exclusion lock, Lockable and TimedLockable like
// std::timed_mutex, so std::unique_lock, std::scoped_lock and std::lock work with it. It is a thin
// adapter over a backend's lease: lock() acquires one, unlock() releases it.
//
// Sharing: like std::mutex, one object may be used by many threads of a process; each lock()
// competes for the distributed lock (a second thread of the same process waits like any other
// client). Not re-entrant: use recursive_mutex for that. The backend must outlive the mutex.
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

    /// Blocks until the lock is held. Throws dlock::error if the backend fails (nothing is held
    /// then) or if lock_options::max_attempts is reached (errc::attempts_exhausted). Waiting is
    /// notification-driven; there is no hidden retry budget.
    void lock();

    /// One attempt. false only when someone else holds the lock; throws when it cannot tell.
    [[nodiscard]] bool try_lock();

    /// Waits at most `timeout` (negative counts as zero). false when the lock stayed held by
    /// someone else; throws on backend failure.
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

    /// Releases the lock (atomic compare-and-delete). Never throws: if the lease was already lost
    /// the failure goes to the client's error handler; no other owner's lock is touched.
    void unlock() noexcept;

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
    mutable std::mutex
        lease_mutex_;  // guards lease_ (a holder's queries may race a waiter's adopt)
    lease lease_;
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
