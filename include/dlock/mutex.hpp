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
        return try_lock_until_steady(steady_deadline_after(timeout));
    }

    /// Waits until `deadline`, converted to steady_clock once on entry. A past deadline means one
    /// attempt.
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
        using steady = std::chrono::steady_clock;
        if constexpr (std::is_same_v<Clock, steady>) {
            // Exact, but clamped: a coarse extreme deadline would overflow in nanoseconds.
            if (deadline >= std::chrono::floor<Duration>(steady::time_point::max())) {
                return try_lock_until_steady(steady::time_point::max());
            }
            if (deadline <= std::chrono::ceil<Duration>(steady::time_point::min())) {
                return try_lock_until_steady(steady::time_point::min());
            }
            return try_lock_until_steady(std::chrono::time_point_cast<steady::duration>(deadline));
        } else {
            // Subtract in the caller's unit, for the same reason, and only a later deadline from
            // an earlier now (min() - now would overflow too).
            const auto now = std::chrono::time_point_cast<Duration>(Clock::now());
            if (deadline <= now) return try_lock_until_steady(steady::now());
            return try_lock_until_steady(steady_deadline_after(deadline - now));
        }
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
    template <class Rep, class Period>
    static std::chrono::steady_clock::time_point steady_deadline_after(
        const std::chrono::duration<Rep, Period>& timeout) {
        const auto now = std::chrono::steady_clock::now();
        if (timeout <= timeout.zero()) return now;
        // Compare in the caller's unit: converting `forever` to nanoseconds would overflow.
        const auto room = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(
            std::chrono::steady_clock::time_point::max() - now);
        if (timeout >= room) return std::chrono::steady_clock::time_point::max();
        return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
    }
    bool try_lock_until_steady(std::chrono::steady_clock::time_point deadline);
    void adopt(lease&& grant);

    backend& backend_;
    std::string name_;
    lock_options options_;
    mutable std::mutex
        lease_mutex_;  // guards lease_ (a holder's queries may race a waiter's adopt)
    lease lease_;
};

}  // namespace dlock
