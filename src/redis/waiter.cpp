#include "redis/waiter.hpp"

#include "core/token.hpp"

namespace dlock::redis::detail {

const std::string waiter_strategy::none_;

std::string waiter_strategy::new_token() const {
    auto token = dlock::detail::random_token();
    if (context_.kind == lock_kind::fair) return "fair:" + context_.client_tag + "." + token;
    if (context_.kind == lock_kind::write) return "write:" + context_.client_tag + "." + token;
    return token;
}

steady::time_point waiter_strategy::retry_after(const contended_attempt& attempt,
                                                bool keeps_entry_alive,
                                                steady::time_point now) const {
    return retry_at(now, attempt.found, attempt.lease, keeps_entry_alive, context_.node_timeout,
                    context_.jitter);
}

std::unique_ptr<waiter_strategy> make_waiter(waiter_context context, bool queued) {
    if (queued) return std::make_unique<queued_waiter>(std::move(context));
    // Redlock registers its waiters too, on every server (docs/redlock.md, "Waiting"): each
    // server hands its key to its own live head and tells it, and a quorum of those grants at one
    // fencing token is a grant (else an attempt takes a quorum of the keys up).
    if (context.kind == lock_kind::exclusive)
        return std::make_unique<mutex_waiter>(std::move(context));
    return std::make_unique<broadcast_waiter>(std::move(context));
}

}  // namespace dlock::redis::detail
