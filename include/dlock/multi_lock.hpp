// `dlock::multi_lock`: several distributed locks taken all-or-nothing, as one Lockable and
// TimedLockable object (std::unique_lock, std::scoped_lock and std::lock work with it). The parts
// may be of any kind (exclusive, shared, semaphore permits, ...) and on different backends (two
// Redis servers, a Redis server and a Redlock set). Use it when one operation needs several
// resources at once, e.g. moving stock between two warehouses that have their own lock servers.
//
// Every multi_lock takes its parts in one global order (by name, then backend), so two
// multi_locks over overlapping sets cannot deadlock whatever order their callers listed the parts
// in; on any failure the parts already taken are released (last taken first) before the call
// returns or throws, so nothing is held after a failed attempt.
//
// Sharing: like dlock::mutex, one object may be used by many threads of a process and holds at
// most one set of grants: while a thread owns it (from lock() until that thread's unlock(), even
// if a part was lost meanwhile), another thread's lock() / try_lock_for() waits in the process
// for that unlock(), and an unlock() only ever releases its caller's own grants. A forked child's
// copies are inert (never touch the servers). The backends must outlive the multi_lock.
//
// Note: std::unique_lock::owns_lock() means "lock() returned", not "every lease is still valid".
// Check state() / lost_token(), and pass fencing_tokens() to the protected resources.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/detail/deadline.hpp>
#include <dlock/detail/owner_gate.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>

namespace dlock {

/// One lock of a multi_lock: the lock `name` of kind `request.kind` on `service`.
/// `dlock::lock_part{redis_eu, "stock/sku-42"}` is an exclusive lock;
/// `{redis_us, "catalog", {.kind = dlock::lock_kind::read}}` a shared one.
struct lock_part {
    backend& service;
    std::string name;
    lock_request request = {};
};

class multi_lock {
public:
    /// Validates `options`, that `parts` is not empty, that no name is empty, and that no lock
    /// appears twice (the same name on the same backend object, whatever the kinds): each is
    /// errc::invalid_argument, naming the part. The options (lease, renewal, max_hold, on_lost,
    /// cancel, ...) apply to every part. Contacts no server.
    explicit multi_lock(std::vector<lock_part> parts, lock_options options = {});
    multi_lock(const multi_lock&) = delete;
    multi_lock& operator=(const multi_lock&) = delete;
    /// Releases every part this object still holds. Never throws.
    ~multi_lock();

    /// Blocks until every part is held (first until no other thread of this process owns the
    /// object). Throws dlock::error if a backend fails, if lock_options::max_attempts is reached
    /// on a part (errc::attempts_exhausted) or if lock_options::cancel fires (errc::canceled); the
    /// message names the part. Nothing is held after a throw: the parts taken before the failure
    /// were released. errc::invalid_argument if the calling thread owns the object already.
    void lock();

    /// One attempt per part, in the global order, stopping at the first part held by someone else.
    /// false only when a part is held by someone else; throws when it cannot tell. Nothing is
    /// held after false or a throw.
    [[nodiscard]] bool try_lock();

    /// Waits at most `timeout` for the whole set (one deadline shared by all parts; negative
    /// counts as zero). false when a part stayed held by someone else until then; throws on
    /// backend failure. Nothing is held after false or a throw.
    template <class Rep, class Period>
    [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return try_lock_until_steady(detail::steady_deadline_after(timeout));
    }

    /// As try_lock_for, until `deadline`, converted to steady_clock once on entry. A past deadline
    /// means one attempt per part.
    template <class Clock, class Duration>
    [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
        return try_lock_until_steady(detail::steady_deadline(deadline));
    }

    /// Releases the calling thread's parts (last taken first; each an atomic compare-and-delete).
    /// Never throws: a part whose lease was already lost goes to its client's error handler; no
    /// other owner's lock is touched. Harmless when not held; from a thread that does not own the
    /// object it releases nothing and reports errc::not_owner to the first part's error handler.
    void unlock() noexcept;

    /// The fencing token of each part's current grant, in the order the parts were given to the
    /// constructor. Throws errc::not_owner when not held.
    std::vector<std::uint64_t> fencing_tokens() const;
    /// The smallest time left over the parts' grants; 0 when not held or when a part is lost.
    std::chrono::milliseconds expires_in() const noexcept;
    /// The worst state over the parts (lost over uncertain over held); lost when not held.
    lock_state state() const noexcept;
    /// Fires when any part is lost, and when the set is released; already fired when not held.
    /// Composes with std::jthread and std::condition_variable_any.
    std::stop_token lost_token() const noexcept;

    /// The parts, in the order given to the constructor.
    const std::vector<lock_part>& parts() const noexcept { return parts_; }

private:
    struct grant;  // the leases of one acquisition of the whole set, and their loss watchers
    using grant_ptr = std::unique_ptr<grant>;

    bool try_lock_until_steady(std::chrono::steady_clock::time_point deadline);
    /// Owns the gate, then takes the parts. false on contention (when `contention_is_false`).
    bool lock_until(std::chrono::steady_clock::time_point deadline, bool contention_is_false);
    grant_ptr acquire_all(std::chrono::steady_clock::time_point deadline, std::error_code& ec);
    void adopt(grant_ptr taken) noexcept;

    std::vector<lock_part> parts_;
    std::vector<std::size_t> order_;  // indices into parts_, in the global acquisition order
    lock_options options_;
    detail::owner_gate gate_;            // the owning thread, from lock() to its unlock()
    mutable detail::mutex grant_mutex_;  // a holder's queries may race a waiter's adopt, as in
                                         // dlock::mutex
    grant_ptr grant_ DLOCK_GUARDED_BY(grant_mutex_);
};

}  // namespace dlock
