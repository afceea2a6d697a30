// `dlock::shared_mutex`: a distributed read-write lock — many readers or one writer — with the
// members of std::shared_timed_mutex, so std::unique_lock, std::scoped_lock, std::lock (the write
// side) and std::shared_lock (the read side) work with it. Policy: writer preference. A reader is
// admitted only while no writer holds the lock and no writer waits, so a stream of overlapping
// readers cannot starve a writer; writers are served first come first served, and a writer waits
// for the shares already granted to drain (released, or expired if their holder crashed). The
// converse holds: a continuous stream of writers keeps readers out. Every reader share is its
// own grant (own fencing token, lease and renewal), so a crashed reader's share expires alone.
// docs/lock-family.md describes the protocol.
//
// Sharing: like std::shared_mutex, one object may be used by many threads of a process. Each
// thread may hold one share (lock_shared) at a time, and several threads may hold shares at once;
// unlock_shared() releases the calling thread's share. The write lock is one grant for the
// object, owned by one thread as with dlock::mutex: while a thread owns it (even with a lost
// grant), another thread's lock() waits in the process for that thread's unlock(), and unlock()
// only ever releases its caller's own grant. A forked child's copies are inert (never touch the
// server). The backend must outlive the object.
//
// Note: std::unique_lock / std::shared_lock::owns_lock() means "lock() returned", not "the lease
// is still valid". Check state() / lost_token(), and pass fencing_token() to the resource.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>

#include <dlock/backend.hpp>
#include <dlock/detail/deadline.hpp>
#include <dlock/detail/owner_gate.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>

namespace dlock {

class shared_mutex {
public:
    /// Validates `options` and that `name` is not empty (errc::invalid_argument; the backend checks
    /// its own length limit on first use). Contacts no server. `options` applies to both sides
    /// (lease, renewal, max_hold, on_lost, cancel); `options.wait` is ignored.
    shared_mutex(backend& backend, std::string name, lock_options options = {});
    shared_mutex(const shared_mutex&) = delete;
    shared_mutex& operator=(const shared_mutex&) = delete;
    /// Releases the write lock and every share this object still holds. Never throws.
    ~shared_mutex();

    // Exclusive (write) side.

    /// Blocks until this object holds the write lock: no other writer and no reader share. The
    /// writer waits in a first-come-first-served queue; while it waits, new readers wait too.
    /// Another thread of this process that owns the write lock is waited for first, in the
    /// process. Throws dlock::error if the backend fails or lock_options::max_attempts is reached
    /// (nothing is held then, and the queue place is given up); errc::canceled when
    /// lock_options::cancel fires; errc::invalid_argument if the calling thread holds a share of
    /// this object or its write lock (that would wait for itself) or errc::unsupported if the
    /// backend has no read-write lock.
    void lock();

    /// One attempt. false only when someone else holds the lock (a writer, or reader shares);
    /// throws when it cannot tell.
    [[nodiscard]] bool try_lock();

    /// Waits at most `timeout` (negative counts as zero). false when the lock stayed held by
    /// others; the place in the writers' queue is given up then, so readers are admitted again at
    /// once. Throws on backend failure.
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

    /// Releases the calling thread's write lock (compare-and-delete) and hands it to the next
    /// waiting writer, or lets the waiting readers in. Never throws: a lost lease goes to the
    /// client's error handler; no other owner's grant is touched. No-op when the write lock is not
    /// held; from a thread that does not own it, releases nothing and reports errc::not_owner to
    /// the client's error handler.
    void unlock() noexcept;

    // Shared (read) side.

    /// Blocks until the calling thread holds a share: no writer holds the lock and none waits.
    /// Throws dlock::error if the backend fails or max_attempts is reached (nothing is held then);
    /// errc::invalid_argument if the calling thread already holds a share or the write lock of
    /// this object.
    void lock_shared();

    /// One attempt. false only when a writer holds the lock or waits for it; throws when it cannot
    /// tell.
    [[nodiscard]] bool try_lock_shared();

    /// Waits at most `timeout` (negative counts as zero); false when writers kept the lock.
    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
        return try_lock_shared_until_steady(detail::steady_deadline_after(timeout));
    }

    /// Waits until `deadline`, converted to steady_clock once on entry. A past deadline means one
    /// attempt.
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_shared_until(
        const std::chrono::time_point<Clock, Duration>& deadline) {
        return try_lock_shared_until_steady(detail::steady_deadline(deadline));
    }

    /// Releases the calling thread's share; the last share hands the lock to a waiting writer.
    /// Never throws; no-op when the calling thread holds no share.
    void unlock_shared() noexcept;

    // Observers of the calling thread's grant: its share if it holds one, else the write lock.

    /// The fencing token of that grant (every grant, read or write, gets a larger one than all
    /// earlier grants of this lock); throws errc::not_owner when neither is held.
    std::uint64_t fencing_token() const;
    /// Time left on that grant; 0 when not held.
    std::chrono::milliseconds expires_in() const noexcept;
    /// State of that grant; lost when not held.
    lock_state state() const noexcept;
    /// Fires when that grant is lost or released; already fired when not held.
    std::stop_token lost_token() const noexcept;

    const std::string& name() const noexcept { return name_; }

private:
    bool try_lock_until_steady(std::chrono::steady_clock::time_point deadline);
    bool try_lock_shared_until_steady(std::chrono::steady_clock::time_point deadline);
    /// The calling thread's share, else the write lease; null when neither. Call with
    /// leases_mutex_ held.
    const lease* current() const noexcept DLOCK_REQUIRES(leases_mutex_);
    void refuse_second_share() const;

    backend& backend_;
    std::string name_;
    lock_options options_;
    detail::owner_gate writer_gate_;  // the thread owning the write lock, until its unlock()
    mutable detail::mutex leases_mutex_;
    lease writer_ DLOCK_GUARDED_BY(leases_mutex_);
    std::unordered_map<std::thread::id, lease> readers_ DLOCK_GUARDED_BY(leases_mutex_);
};

}  // namespace dlock
