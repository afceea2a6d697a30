#include <dlock/detail/owner_gate.hpp>

namespace dlock::detail {

owner_gate::entry owner_gate::enter(std::chrono::steady_clock::time_point deadline,
                                    std::stop_token cancel) {
    const auto me = std::this_thread::get_id();
    std::unique_lock lock(mutex_);
    if (owned_ && owner_ == me) return entry::already_owner;
    const auto free = [this] { return !owned_; };
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
    std::lock_guard lock(mutex_);
    return owned_ && owner_ == std::this_thread::get_id();
}

void owner_gate::leave() noexcept {
    {
        std::lock_guard lock(mutex_);
        owned_ = false;
        owner_ = {};
    }
    free_.notify_one();
}

}  // namespace dlock::detail
