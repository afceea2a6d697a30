// `dlock::counting_semaphore`: a distributed counting semaphore with a runtime number of permits,
// shaped like std::counting_semaphore (acquire, try_acquire, try_acquire_for, try_acquire_until,
// release, max). Use it to cap how many clients use a resource at once (e.g. at most 3 workers
// calling a rate-limited API). Each grant of k permits is a lease: renewed by the client's
// watchdog while held, and given back by the server when its holder crashes (Redisson's
// permit-expirable semaphore), so a dead client never keeps permits for longer than its lease.
//
// Sharing: like std::counting_semaphore, one object may be used by many threads of a process.
// Within one object permits are interchangeable, but release() gives back the calling thread's
// own grants first, then grants already lost, and only then other threads' grants (most recent
// first in each group), so a thread whose grant ran out never hands back the permit another thread
// of the object is using. A thread that needs its own fencing token or loss
// notification per grant uses its own counting_semaphore object (several objects may share one
// name) or backend::acquire_until with lock_kind::permits. The backend must outlive the object.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/detail/deadline.hpp>
#include <dlock/lease.hpp>
#include <dlock/detail/thread_safety.hpp>
#include <dlock/options.hpp>

namespace dlock {

class counting_semaphore {
public:
    /// Validates `options`, that `name` is not empty and that `permits` >= 1
    /// (errc::invalid_argument). `permits` is the number of permits the semaphore gets on the
    /// server when the first acquire finds none set; an existing number is left alone (change it
    /// with set_permits()). lock_options::wait is ignored: each acquire call carries its own
    /// bound. Contacts no server.
    counting_semaphore(backend& backend, std::string name, std::uint32_t permits,
                       lock_options options = {});
    counting_semaphore(const counting_semaphore&) = delete;
    counting_semaphore& operator=(const counting_semaphore&) = delete;
    /// Releases every permit this object still holds. Never throws: failures go to the client's
    /// error handler and those permits come back when their leases run out.
    ~counting_semaphore();

    /// Blocks until `count` permits are granted at once (one grant, one fencing token). Throws
    /// errc::invalid_argument when `count` is 0 or above max(), and dlock::error when the backend
    /// fails, lock_options::max_attempts is reached (errc::attempts_exhausted) or
    /// lock_options::cancel fires (errc::canceled); nothing is taken then. Waiting is
    /// notification-driven: a release or set_permits() wakes the waiters, and a waiter re-checks
    /// on its own when the earliest held permit would expire.
    void acquire(std::uint32_t count = 1);

    /// One attempt. false only when fewer than `count` permits are free; throws as acquire().
    [[nodiscard]] bool try_acquire(std::uint32_t count = 1);

    /// Waits at most `timeout` (negative counts as zero) for `count` permits. false when they
    /// stayed taken; throws as acquire().
    template <class Rep, class Period>
    [[nodiscard]] bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout,
                                       std::uint32_t count = 1) {
        return try_acquire_until_steady(detail::steady_deadline_after(timeout), count);
    }

    /// Waits until `deadline`, converted to steady_clock once on entry. A past deadline means one
    /// attempt.
    template <class Clock, class Duration>
    [[nodiscard]] bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& deadline,
                                         std::uint32_t count = 1) {
        return try_acquire_until_steady(detail::steady_deadline(deadline), count);
    }

    /// Gives back `update` permits held by this object: its grants are returned whole, the calling
    /// thread's own first, then lost ones, then the other threads' (most recent first in each
    /// group), until `update` permits are back (each grant is an atomic compare-and-remove
    /// of its own server entry, which wakes the waiters). `update` must match whole grants:
    /// after acquire(2) and acquire(1), release(1) and release(3) are fine, release(2) is not
    /// (it would split the grant of 2), and is refused with errc::invalid_argument; more than
    /// this object holds is errc::not_owner. In both cases nothing is released. release(0) does
    /// nothing. A grant lost meanwhile (expired) is not an error here: it goes to the client's
    /// error handler, as do server failures (those permits come back when their leases run out).
    /// Never releases another owner's permits.
    void release(std::uint32_t update = 1);
    /// The non-throwing twin of release(): sets `ec` instead of throwing.
    void release(std::uint32_t update, std::error_code& ec) noexcept;

    /// The number of permits this object sets on first use (the constructor's `permits`, or the
    /// last number set through set_permits() on this object). Another client may have set a
    /// different number on the server; acquire() refuses counts above this one.
    std::uint32_t max() const noexcept { return permits_.load(); }

    /// Administrative: sets the semaphore's number of permits on the server, now (see
    /// backend::set_permits), and max() of this object. Raising it wakes the waiters; lowering it
    /// below the permits held keeps them held, and acquirers wait until enough are released.
    /// errc::invalid_argument when `permits` is 0, errc::unsupported when the backend has no
    /// semaphore (Redlock), another errc when the backend fails.
    void set_permits(std::uint32_t permits);
    void set_permits(std::uint32_t permits, std::error_code& ec) noexcept;

    /// How many permits this object holds now (the sum of its grants).
    std::uint32_t held() const noexcept;

    /// The fencing token of this object's most recent grant (strictly rising across all grants of
    /// this name); throws errc::not_owner when nothing is held.
    std::uint64_t fencing_token() const;
    /// The shortest time left among the held grants (conservative); 0 when nothing is held.
    std::chrono::milliseconds expires_in() const noexcept;
    /// The worst state among the held grants (lost > uncertain > held); lost when nothing is held.
    lock_state state() const noexcept;
    /// Fires when any grant this object holds is lost, and when the object gives back its last
    /// permit (as dlock::mutex's fires on unlock). A partial release() does not fire it. Already
    /// fired when nothing is held.
    std::stop_token lost_token() const noexcept;

    const std::string& name() const noexcept { return name_; }

private:
    /// The grants held (a detail::composite_grant, in grant order, whose lost source is the
    /// current holding period's) and each one's count and acquiring thread.
    struct grant_set;
    /// Grants taken out by release(), released outside grants_mutex_ (most recent first).
    struct detached_grants;

    bool try_acquire_until_steady(std::chrono::steady_clock::time_point deadline,
                                  std::uint32_t count);
    lease take(std::chrono::steady_clock::time_point deadline, std::uint32_t count,
               std::error_code& ec);
    void adopt(lease&& held, std::uint32_t count);
    /// Takes grants covering exactly `update` permits out of grants_, in release() order; sets `ec`
    /// (and takes none) when `update` would split a grant or exceeds what is held. When nothing
    /// is left, `ended` becomes the finished holding period's source, for the caller to fire.
    std::unique_ptr<detached_grants> detach(std::uint32_t update, std::stop_source& ended,
                                            std::error_code& ec) noexcept;

    backend& backend_;
    std::string name_;
    lock_options options_;
    std::atomic<std::uint32_t> permits_;
    mutable detail::mutex grants_mutex_;
    // Its source fires when a grant is lost or all are back.
    std::unique_ptr<grant_set> grants_ DLOCK_GUARDED_BY(grants_mutex_);
};

}  // namespace dlock
