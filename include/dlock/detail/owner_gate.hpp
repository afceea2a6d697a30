// The local half of a lock object shared by the threads of a process (dlock::mutex, the write
// side of dlock::shared_mutex, dlock::multi_lock): a gate with one owning thread, entered before
// the backend is asked and left after the grant is released. While one thread owns the object
// (even with a grant that was lost meanwhile) the others wait here, as with a std::mutex, so the
// object never holds two grants and an unlock() can only release its caller's own. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <thread>

#include <dlock/detail/thread_safety.hpp>

namespace dlock::detail {

class owner_gate {
public:
    enum class entry {
        entered,        ///< the calling thread owns the gate now
        timed_out,      ///< another thread owned it until the deadline
        canceled,       ///< `cancel` fired while another thread owned it
        already_owner,  ///< the calling thread owns it already (not re-entrant); nothing changed
    };

    /// Waits until no thread owns the gate and makes the calling thread its owner. A past deadline
    /// means one look; steady_clock::time_point::max() means no bound.
    entry enter(std::chrono::steady_clock::time_point deadline, std::stop_token cancel);
    /// True if the calling thread owns the gate.
    bool owned_by_caller() const noexcept;
    /// Gives ownership up (called by the owner, or by the object's destructor) and wakes one
    /// waiter.
    void leave() noexcept;

private:
    mutable detail::mutex mutex_;
    std::condition_variable_any free_;
    bool owned_ DLOCK_GUARDED_BY(mutex_) = false;
    std::thread::id owner_ DLOCK_GUARDED_BY(mutex_);
};

}  // namespace dlock::detail
