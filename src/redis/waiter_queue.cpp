// queued_waiter (waiter.hpp): the fair and write kinds, granted by hand-off
// (docs/lock-family.md, "Hand-off").
#include "redis/waiter.hpp"

namespace dlock::redis::detail {

queued_waiter::queued_waiter(waiter_context context)
    : waiter_strategy(std::move(context)), token_(new_token()) {}

const std::string& queued_waiter::next_token() {
    return token_;  // its place in the queue: one token for the whole call
}

wait_target queued_waiter::subscribe_target() const {
    // This client's hand-off channel for the lock (the token up to its '.'), shared with our
    // other waiters on it and subscribed once: the subscriber hands each waiter its own grants.
    return {context_.release_channel + ":" + std::string(handoff_client(token_)), false, token_};
}

steady::time_point queued_waiter::contended(const contended_attempt& attempt,
                                            steady::time_point now) {
    if (attempt.holding > 0) ticket_.not_yet(attempt.ticket, attempt.sent, attempt.lease);
    // The refresh of its entry's liveness is also the bounded re-check for a missed hand-off.
    return retry_after(attempt, true, now);
}

std::optional<handoff_grant> queued_waiter::woke(const std::vector<std::string>& messages,
                                                 steady::time_point now) const {
    // Direct hand-off: the releaser made us the owner and told us the fencing token, so no round
    // trip is needed. Only the latest message is kept, and messages arrive in the order they
    // were published, so a stale one never hides the grant of our current entry.
    return ticket_.accept(messages.front(), token_, now, context_.drift);
}

}  // namespace dlock::redis::detail
