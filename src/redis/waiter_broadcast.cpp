// broadcast_waiter (waiter.hpp): every release publishes on the lock's release channel.
#include "redis/waiter.hpp"

namespace dlock::redis::detail {

const std::string& broadcast_waiter::next_token() {
    // Each attempt owns a fresh token: a grant that lands after its attempt gave up (its reply
    // lost) is undone by that attempt's compare-and-delete and never mistaken for a later one.
    token_ = new_token();
    return token_;
}

wait_target broadcast_waiter::subscribe() {
    // A release lets one exclusive (or reentrant) waiter in: it wakes one of ours, not all.
    // Semaphores and readers: every waiter may get in.
    const bool one_gets_in =
        context_.kind == lock_kind::exclusive || context_.kind == lock_kind::reentrant;
    return {context_.release_channel, one_gets_in, {}};
}

steady::time_point broadcast_waiter::contended(const contended_attempt& attempt,
                                               steady::time_point now) {
    return retry_after(attempt, false, now);
}

}  // namespace dlock::redis::detail
