#include "core/composite_grant.hpp"

#include <algorithm>
#include <utility>

namespace dlock::detail {

int severity(lock_state state) noexcept {
    switch (state) {
        case lock_state::held: return 0;
        case lock_state::uncertain: return 1;
        case lock_state::lost: return 2;
    }
    return 2;
}

lock_state worse(lock_state a, lock_state b) noexcept { return severity(b) > severity(a) ? b : a; }

std::stop_token fired_token() noexcept {
    std::stop_source fired;
    fired.request_stop();
    return fired.get_token();
}

composite_grant::~composite_grant() {
    relays_.clear();
    while (!parts_.empty()) parts_.pop_back();  // newest first; each release is one round trip
    lost_.request_stop();
}

composite_grant::relay composite_grant::watch(const lease& part, std::stop_source target) {
    return std::make_unique<std::stop_callback<relay_loss>>(part.lost_token(),
                                                            relay_loss{std::move(target)});
}

void composite_grant::reserve(std::size_t more) {
    parts_.reserve(parts_.size() + more);
    relays_.reserve(relays_.size() + more);
}

void composite_grant::add(lease&& part, relay watch) {
    reserve(1);  // the only step that may throw; the push_backs below then cannot
    relays_.push_back(std::move(watch));
    parts_.push_back(std::move(part));
}

void composite_grant::add(lease&& part) {
    auto w = watch(part);
    add(std::move(part), std::move(w));
}

composite_grant::detached composite_grant::remove(std::size_t i) noexcept {
    detached out{std::move(parts_[i]), std::move(relays_[i])};
    parts_.erase(parts_.begin() + static_cast<std::ptrdiff_t>(i));
    relays_.erase(relays_.begin() + static_cast<std::ptrdiff_t>(i));
    return out;
}

std::stop_source composite_grant::finish(std::stop_source fresh) noexcept {
    return std::exchange(lost_, std::move(fresh));
}

std::chrono::milliseconds composite_grant::expires_in() const noexcept {
    if (parts_.empty()) return std::chrono::milliseconds::zero();
    auto least = std::chrono::milliseconds::max();
    for (const auto& p : parts_) least = std::min(least, p.expires_in());
    return least;
}

lock_state composite_grant::state() const noexcept {
    if (parts_.empty()) return lock_state::lost;
    auto worst = lock_state::held;
    for (const auto& p : parts_) worst = worse(worst, p.state());
    return worst;
}

std::stop_token composite_grant::lost_token() const noexcept {
    return parts_.empty() ? fired_token() : lost_.get_token();
}

}  // namespace dlock::detail
