// `dlock::recursive_mutex`: a distributed mutual-exclusion lock that its owner may take again
// (Redisson's reentrant lock), Lockable and TimedLockable like std::recursive_timed_mutex, so
// std::unique_lock, std::scoped_lock and std::lock work with it, nested too. Use it where code
// that holds the lock calls code that locks it again; otherwise prefer dlock::mutex.
//
// The owner is one thread using this object: the thread that holds it may lock() again (one more
// level, same fencing token, one round trip) and must unlock() once per level; another thread of
// the same process, like another process, is another owner and waits. The server keeps the depth
// (a counter per owner in the lock's hash), so it is the truth: re-entering a grant that was lost
// throws errc::lock_lost instead of quietly taking a new one. Two recursive_mutex objects for one
// name are two owners even in one thread (the second waits for the first): use one object per
// name and process.
//
// Sharing: like std::recursive_mutex, one object may be used by many threads of a process. The
// observers (fencing_token, expires_in, state, lost_token, depth) describe the calling thread's
// grant. The backend must outlive the mutex. A name is used by one lock kind only: locking a name
// that a dlock::mutex holds fails with errc::unexpected_reply (and touches nothing).
//
// Note: std::unique_lock::owns_lock() means "lock() returned", not "the lease is still valid".
// Check state() / lost_token(), and pass fencing_token() to the protected resource.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>

#include <dlock/backend.hpp>
#include <dlock/detail/deadline.hpp>
#include <dlock/lease.hpp>
#include <dlock/detail/thread_safety.hpp>
#include <dlock/options.hpp>

namespace dlock {

class recursive_mutex {
public:
    /// Validates `options` and that `name` is not empty (errc::invalid_argument; the backend checks
    /// its own length limit on first use). Contacts no server.
    recursive_mutex(backend& backend, std::string name, lock_options options = {});
    recursive_mutex(const recursive_mutex&) = delete;
    recursive_mutex& operator=(const recursive_mutex&) = delete;
    /// Releases every level still held, by any thread. Never throws.
    ~recursive_mutex();

    /// Blocks until the calling thread holds the lock. If it already does, takes one more level
    /// in one round trip without waiting. Throws dlock::error if the backend fails (nothing new is
    /// held then), errc::attempts_exhausted when lock_options::max_attempts is reached, and
    /// errc::lock_lost when this thread's grant was lost (the levels it holds stay held until it
    /// unlocks them; nothing is taken anew). Waiting is notification-driven.
    void lock();

    /// One attempt. false only when another owner holds the lock; a thread that holds it always
    /// gets one more level. Throws when it cannot tell, and like lock() on a lost grant.
    [[nodiscard]] bool try_lock();

    /// Waits at most `timeout` (negative counts as zero) while another owner holds the lock.
    /// false when it stayed held by another owner; throws like lock().
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

    /// Leaves the calling thread's innermost level (one round trip); the last level deletes the
    /// lock and wakes the waiters. Never throws: if the grant was already lost the failure goes
    /// to the client's error handler, and no other owner's lock is touched. A thread that holds
    /// no level (std says: undefined behaviour) changes nothing.
    void unlock() noexcept;

    /// The fencing token of the calling thread's grant, the same at every level; throws
    /// errc::not_owner when this thread does not hold the lock.
    std::uint64_t fencing_token() const;
    /// Time left on the calling thread's grant (the most conservative of its levels); 0 when
    /// this thread does not hold the lock.
    std::chrono::milliseconds expires_in() const noexcept;
    /// State of the calling thread's grant (the worst of its levels); lost when this thread does
    /// not hold the lock.
    lock_state state() const noexcept;
    /// Fires when the calling thread's grant is lost (any level finds it gone) or fully unlocked;
    /// already fired when this thread does not hold the lock.
    std::stop_token lost_token() const noexcept;
    /// How many levels the calling thread holds; 0 when it does not hold the lock.
    std::size_t depth() const noexcept;

    const std::string& name() const noexcept { return name_; }

private:
    struct owner;  // one thread's levels (leases) and its loss relay

    bool try_lock_until_steady(std::chrono::steady_clock::time_point deadline);
    owner* mine() const;  // the calling thread's levels, or nullptr
    lease take(owner* held, std::chrono::steady_clock::time_point deadline, std::error_code& ec);
    void adopt(lease&& grant);

    backend& backend_;
    std::string name_;
    lock_options options_;
    mutable detail::mutex owners_mutex_;  // guards the map, and each owner's vectors
    std::unordered_map<std::thread::id, std::unique_ptr<owner>> owners_
        DLOCK_GUARDED_BY(owners_mutex_);
};

}  // namespace dlock
