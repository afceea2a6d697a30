// Where one acquire call listens for the message that ends its wait (engine.cpp's acquire loop):
// a registration on the client's subscriber, or on Redlock one on each node's subscriber (each
// node hands its own key to its own head and tells it: docs/redlock.md, "Waiting"), waited on
// together through a signal (subscriber.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/subscriber.hpp"
#include "redis/waiter.hpp"

namespace dlock::redis::detail {

class listener {
public:
    /// Registers `target` on each of `subscribers` (one per node); `quorum`: how many of them a
    /// wait for the subscription needs.
    listener(const std::vector<std::unique_ptr<subscriber>>& subscribers, const wait_target& target,
             std::size_t quorum);
    listener(const listener&) = delete;
    listener& operator=(const listener&) = delete;

    /// As subscriber::registration's, over every node: read it before an attempt.
    std::uint64_t generation() const;
    /// Waits until a quorum of nodes confirmed the subscription, or `deadline`.
    void wait_subscribed(steady::time_point deadline, const std::stop_token& cancel) const;
    /// Sleeps until something newer than `seen` arrived on any node (subscriber::registration::
    /// wait), or `deadline`.
    void wait(std::uint64_t seen, steady::time_point deadline, const std::stop_token& cancel) const;
    /// Whether a quorum of nodes has been subscribed without a break since the registration.
    bool subscribed_throughout() const;
    /// The waiter got the lock (subscriber::registration::granted).
    void granted() noexcept;
    /// Each node's latest message for this waiter, in node order.
    std::vector<std::string> last_messages() const;

private:
    std::size_t quorum_;
    std::unique_ptr<signal> signal_;  // several nodes only
    std::vector<subscriber*> subscribers_;
    std::vector<std::unique_ptr<subscriber::registration>> on_;
};

}  // namespace dlock::redis::detail
