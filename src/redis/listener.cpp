#include "redis/listener.hpp"

#include <algorithm>

namespace dlock::redis::detail {

listener::listener(const std::vector<std::unique_ptr<subscriber>>& subscribers,
                   const wait_target& target, std::size_t quorum)
    : quorum_(quorum), signal_(subscribers.size() > 1 ? std::make_unique<signal>() : nullptr) {
    const auto mode = target.wake_one ? subscriber::wake_mode::one : subscriber::wake_mode::all;
    on_.reserve(subscribers.size());
    for (const auto& s : subscribers) {
        subscribers_.push_back(s.get());
        on_.push_back(std::make_unique<subscriber::registration>(*s, target.channel, mode,
                                                                 target.key, signal_.get()));
    }
}

std::uint64_t listener::generation() const {
    // The signal moves with every change on any node (raised under that node's subscriber mutex).
    return signal_ ? signal_->version() : on_.front()->generation();
}

void listener::wait_subscribed(steady::time_point deadline, const std::stop_token& cancel) const {
    if (!signal_) return on_.front()->wait_subscribed(deadline, cancel);
    for (;;) {
        const auto seen = signal_->version();  // before the count: a confirmation after it wakes
        const auto confirmed =
            std::count_if(on_.begin(), on_.end(), [](const auto& r) { return r->subscribed(); });
        if (static_cast<std::size_t>(confirmed) >= quorum_ || cancel.stop_requested() ||
            steady::now() >= deadline)
            return;
        signal_->wait(seen, deadline, cancel);
    }
}

void listener::wait(std::uint64_t seen, steady::time_point deadline,
                    const std::stop_token& cancel) const {
    if (!signal_) return on_.front()->wait(seen, deadline, cancel);
    // This thread reads every node's connection itself when all can be lent: a grant wakes it
    // directly, not through the background thread and the signal.
    const auto changed = [&] { return signal_->version() != seen; };
    if (changed() || subscriber::read_lent(subscribers_, deadline, cancel, changed)) return;
    // Else every node's background thread reads for us while we sleep on the signal.
    std::vector<std::unique_ptr<subscriber::registration::reading>> reading;
    reading.reserve(on_.size());
    for (const auto& r : on_)
        reading.push_back(std::make_unique<subscriber::registration::reading>(*r));
    signal_->wait(seen, deadline, cancel);
}

bool listener::subscribed_throughout() const {
    const auto throughout = std::count_if(on_.begin(), on_.end(),
                                          [](const auto& r) { return r->subscribed_throughout(); });
    return static_cast<std::size_t>(throughout) >= quorum_;
}

void listener::granted() noexcept {
    for (auto& r : on_) r->granted();
}

std::vector<std::string> listener::last_messages() const {
    std::vector<std::string> out;
    out.reserve(on_.size());
    for (const auto& r : on_) out.push_back(r->last_message());
    return out;
}

}  // namespace dlock::redis::detail
