#include <dlock/detail/owner_gate.hpp>

namespace dlock::detail {

owner_gate::entry owner_gate::enter(std::chrono::steady_clock::time_point deadline,
                                    std::stop_token cancel) {
    const auto me = std::this_thread::get_id();
    detail::unique_lock lock(mutex_);
    if (owned_ && owner_ == me) return entry::already_owner;
    // Called by wait() with mutex_ held (the analysis does not see into the wait).
    const auto free = [this]() DLOCK_NO_THREAD_SAFETY_ANALYSIS { return !owned_; };
    bool entered = false;
    if (deadline == std::chrono::steady_clock::time_point::max()) {
        entered = free_.wait(lock, cancel, free);
    } else {
        entered = free_.wait_until(lock, cancel, deadline, free);
    }
    if (!entered) return cancel.stop_requested() ? entry::canceled : entry::timed_out;
    owned_ = true;
    owner_ = me;
    return entry::entered;
}

bool owner_gate::owned_by_caller() const noexcept {
    detail::lock_guard lock(mutex_);
    return owned_ && owner_ == std::this_thread::get_id();
}

void owner_gate::leave() noexcept {
    {
        detail::lock_guard lock(mutex_);
        owned_ = false;
        owner_ = {};
    }
    free_.notify_one();
}

}  // namespace dlock::detail
