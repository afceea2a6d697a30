// mutex_waiter (waiter.hpp): the exclusive kind (docs/redis-lock.md, "Waking one waiter"; on
// Redlock docs/redlock.md, "Waiting").
#include "redis/waiter.hpp"

#include "core/token.hpp"

namespace dlock::redis::detail {

mutex_waiter::mutex_waiter(waiter_context context)
    : waiter_strategy(std::move(context)), handoff_(context_.nodes) {}

const std::string& mutex_waiter::next_token() {
    // Registered: a key handed to us holds our id, so the id is our token.
    if (!waiter_.empty()) return waiter_;
    token_ = new_token();  // unregistered (a first attempt, try_lock()): a fresh owner token
    return token_;
}

const std::string* mutex_waiter::leaves_as() const noexcept {
    // Registered (it waited once): every exit but a grant removes the registration.
    return waiter_.empty() ? nullptr : &waiter_;
}

wait_target mutex_waiter::target() const {
    return {context_.release_channel + ":mutex:" + context_.client_tag, false, waiter_};
}

std::optional<wait_target> mutex_waiter::lingering() const {
    return target();  // its key is made by listen_early()
}

wait_target mutex_waiter::listen_early() {
    // Registered from the first attempt on: a release between that attempt and a subscription
    // cannot be missed (the channel is subscribed already), so no second attempt follows.
    return subscribe();
}

wait_target mutex_waiter::subscribe() {
    // From its first wait on, the waiter registers among the mutex waiters under an id of its
    // own, and a release hands the key to their live head and tells it on this client's channel
    // for the lock. Several waiters here on one name each have their own id, so each is told by
    // name and none is stranded.
    waiter_ = "mutex:" + context_.client_tag + "." + dlock::detail::random_token();
    return target();
}

steady::time_point mutex_waiter::contended(const contended_attempt& attempt,
                                           steady::time_point now) {
    last_round_ = now - attempt.sent;
    // Redlock: the undo took our entries off every node, so their grants count no more, and the
    // next attempt registers again with higher tickets. Else every node answered "held": a grant
    // of its counts from this attempt on (quorum_handoff; one node: its grant is the quorum).
    if (attempt.undone) {
        handoff_.forget();
    } else {
        for (std::size_t i = 0; i < attempt.node_tickets.size(); ++i)
            handoff_.not_yet(i, attempt.node_tickets[i], attempt.sent, attempt.lease);
    }
    // Registered: the entry's liveness is refreshed on time, which also bounds how long a head
    // handed the key that never takes it up (paused, dead) keeps it from the others.
    return retry_after(attempt, !waiter_.empty(), now);
}

std::optional<handoff_grant> mutex_waiter::woke(const std::vector<std::string>& messages,
                                                steady::time_point now) const {
    if (waiter_.empty()) return std::nullopt;
    return handoff_.accept(messages, waiter_, now, context_.drift);
}

std::chrono::nanoseconds mutex_waiter::awaits_more(const std::vector<std::string>& messages,
                                                   steady::time_point now) const {
    // Redlock: a release reaches every node at once, so the rest of a quorum's grants follow the
    // first within about the spread of one round on every node: twice our last attempt's round
    // trip (which waited for every node), at least 1 ms (a scheduling delay on a loaded
    // machine), at most 2 x node_timeout. Grants that stay short of a quorum mean the nodes'
    // queues disagree (or a node is slow): the attempt then settles it (a split is undone), and
    // every key held meanwhile by a waiter with too few of them delays the next grant, so the
    // wait is short. One node's grant is a quorum by itself: nothing more to wait for.
    if (context_.nodes < 2 || waiter_.empty()) return {};
    if (handoff_.granting(messages, waiter_, now, context_.drift) == 0) return {};
    const std::chrono::nanoseconds floor = std::chrono::milliseconds(1);
    return std::min<std::chrono::nanoseconds>(
        std::max<std::chrono::nanoseconds>(2 * last_round_, floor), 2 * context_.node_timeout);
}

}  // namespace dlock::redis::detail
