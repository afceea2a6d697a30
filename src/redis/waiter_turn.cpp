// turn_waiter (waiter.hpp): the exclusive kind on one server (docs/redis-lock.md, "Waking one
// waiter").
#include "redis/waiter.hpp"

#include "core/token.hpp"

namespace dlock::redis::detail {

turn_waiter::turn_waiter(waiter_context context)
    : waiter_strategy(std::move(context)), handoff_(context_.nodes) {}

const std::string& turn_waiter::next_token() {
    // Redlock, registered: a node's key handed to us holds our id, so the id is our token.
    if (context_.nodes > 1 && !waiter_.empty()) return waiter_;
    token_ = new_token();  // a fresh owner token per attempt, as broadcast_waiter
    return token_;
}

const std::string* turn_waiter::leaves_as() const noexcept {
    // Registered (it waited once): every exit but a grant removes the registration.
    return waiter_.empty() ? nullptr : &waiter_;
}

wait_target turn_waiter::target() const {
    return {context_.release_channel + ":mutex:" + context_.client_tag, false, waiter_};
}

std::optional<wait_target> turn_waiter::lingering() const {
    if (context_.nodes < 2) return std::nullopt;
    return target();  // its key is made by listen_early()
}

wait_target turn_waiter::listen_early() {
    // Registered from the first attempt on: a release between that attempt and a subscription
    // cannot be missed (the channel is subscribed already), so no second attempt follows.
    return subscribe();
}

wait_target turn_waiter::subscribe() {
    // From its first wait on, the waiter registers among the mutex waiters under an id of its
    // own, and a release wakes only their live head, on this client's channel for the lock.
    // Several waiters here on one name each have their own id, so each is woken by name and none
    // is stranded.
    waiter_ = "mutex:" + context_.client_tag + "." + dlock::detail::random_token();
    return target();
}

steady::time_point turn_waiter::contended(const contended_attempt& attempt,
                                          steady::time_point now) {
    last_round_ = now - attempt.sent;
    if (context_.nodes > 1) {
        // The undo took our entries off every node: their grants count no more, and the next
        // attempt registers again with higher tickets. Else every node answered "held": a grant
        // of its counts from this attempt on (quorum_handoff).
        if (attempt.undone) {
            handoff_.forget();
        } else {
            for (std::size_t i = 0; i < attempt.node_tickets.size(); ++i)
                handoff_.not_yet(i, attempt.node_tickets[i], attempt.sent, attempt.lease);
        }
    }
    // Registered: the entry's liveness is refreshed on time, which also bounds how long a woken
    // head that never takes the lock (paused, dead) delays the others.
    return retry_after(attempt, !waiter_.empty(), now);
}

std::optional<handoff_grant> turn_waiter::woke(const std::vector<std::string>& messages,
                                               steady::time_point now) const {
    if (context_.nodes < 2 || waiter_.empty()) return std::nullopt;
    return handoff_.accept(messages, waiter_, now, context_.drift);
}

std::chrono::nanoseconds turn_waiter::awaits_more(const std::vector<std::string>& messages,
                                                  steady::time_point now) const {
    // A release reaches every node at once, so the rest of a quorum's grants follow the first
    // within about the spread of one round on every node: twice our last attempt's round trip
    // (which waited for every node), at least 1 ms (a scheduling delay on a loaded machine), at
    // most 2 x node_timeout. Grants that stay short of a quorum mean the nodes' queues disagree
    // (or a node is slow): the attempt then settles it (a split is undone), and every key held
    // meanwhile by a waiter with too few of them delays the next grant, so the wait is short.
    if (context_.nodes < 2 || waiter_.empty()) return {};
    if (handoff_.granting(messages, waiter_, now, context_.drift) == 0) return {};
    const std::chrono::nanoseconds floor = std::chrono::milliseconds(1);
    return std::min<std::chrono::nanoseconds>(
        std::max<std::chrono::nanoseconds>(2 * last_round_, floor), 2 * context_.node_timeout);
}

}  // namespace dlock::redis::detail
