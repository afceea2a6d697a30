#include <dlock/semaphore.hpp>

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {
namespace {

int severity(lock_state state) noexcept {
    switch (state) {
        case lock_state::held: return 0;
        case lock_state::uncertain: return 1;
        case lock_state::lost: return 2;
    }
    return 2;
}

std::stop_token fired_token() noexcept {
    std::stop_source fired;
    fired.request_stop();
    return fired.get_token();
}

}  // namespace

counting_semaphore::counting_semaphore(backend& backend, std::string name, std::uint32_t permits,
                                       lock_options options)
    : backend_(backend), name_(std::move(name)), options_(std::move(options)), permits_(permits) {
    std::error_code ec;
    if (name_.empty()) {
        detail::fail(ec, errc::invalid_argument, "lock name is empty");
    } else if (permits < 1) {
        detail::fail(ec, errc::invalid_argument,
                     "counting_semaphore \"" + name_ + "\": permits must be >= 1, got 0");
    }
    if (!ec) detail::validate_lock_options(options_, ec);
    detail::throw_if(ec);
}

counting_semaphore::~counting_semaphore() {
    std::error_code ignored;
    release(held(), ignored);  // all grants: always whole, never more than held
}

lease counting_semaphore::take(std::chrono::steady_clock::time_point deadline, std::uint32_t count,
                               std::error_code& ec) {
    const auto limit = permits_.load();
    if (count < 1 || count > limit) {
        detail::fail(ec, errc::invalid_argument,
                     "counting_semaphore \"" + name_ + "\": count must be >= 1 and <= max() (" +
                         std::to_string(limit) + "), got " + std::to_string(count));
        return {};
    }
    return backend_.acquire_until(
        name_, lock_request{.kind = lock_kind::permits, .count = count, .limit = limit}, options_,
        deadline, ec);
}

void counting_semaphore::acquire(std::uint32_t count) {
    std::error_code ec;
    auto grant = take(detail::steady::time_point::max(), count, ec);
    detail::throw_if(ec);
    adopt(std::move(grant), count);
}

bool counting_semaphore::try_acquire(std::uint32_t count) {
    return try_acquire_until_steady(detail::steady::time_point::min(), count);
}

bool counting_semaphore::try_acquire_until_steady(std::chrono::steady_clock::time_point deadline,
                                                  std::uint32_t count) {
    std::error_code ec;
    auto grant = take(deadline, count, ec);
    if (is_contention(ec)) return false;
    detail::throw_if(ec);
    adopt(std::move(grant), count);
    return true;
}

void counting_semaphore::adopt(lease&& held, std::uint32_t count) {
    const auto lost = held.lost_token();
    grant g{std::move(held), count, std::this_thread::get_id(), nullptr};
    for (;;) {
        std::stop_source period;
        {
            detail::lock_guard guard(grants_mutex_);
            period = period_;
        }
        // Watch outside grants_mutex_: a grant already lost runs the callback right here, and that
        // runs the user's callbacks on lost_token(), which may call back into this object.
        auto watch = std::make_unique<std::stop_callback<forward_loss>>(lost, forward_loss{period});
        detail::lock_guard guard(grants_mutex_);
        if (period_ == period) {
            g.watch = std::move(watch);
            grants_.push_back(std::move(g));
            return;
        }
        // The last permit was released meanwhile and a new holding period began: watch for it.
        // (`watch` is destroyed after the guard releases grants_mutex_.)
    }
}

std::vector<counting_semaphore::grant> counting_semaphore::detach(std::uint32_t update,
                                                                  std::stop_source& ended,
                                                                  std::error_code& ec) noexcept {
    ec.clear();
    std::vector<grant> out;
    if (update == 0) return out;
    try {
        std::stop_source next_period;  // allocated up front: nothing below may fail half-way
        detail::lock_guard guard(grants_mutex_);
        // release() order: the caller's own grants, then lost ones (already free on the server),
        // then the other threads' live ones; most recent first within each group.
        const auto me = std::this_thread::get_id();
        std::vector<std::size_t> order;
        order.reserve(grants_.size());
        for (int group = 0; group < 3; ++group) {
            for (std::size_t i = grants_.size(); i-- > 0;) {
                const auto& g = grants_[i];
                const int in = g.thread == me ? 0 : g.held.state() == lock_state::lost ? 1 : 2;
                if (in == group) order.push_back(i);
            }
        }
        std::uint64_t sum = 0;
        std::size_t n = 0;
        for (; n < order.size() && sum < update; ++n) sum += grants_[order[n]].count;
        if (sum < update) {
            detail::fail(ec, errc::not_owner,
                         "counting_semaphore \"" + name_ + "\": release(" + std::to_string(update) +
                             ") but this object holds " + std::to_string(sum) + " permits");
            return out;
        }
        if (sum > update) {
            detail::fail(ec, errc::invalid_argument,
                         "counting_semaphore \"" + name_ + "\": release(" + std::to_string(update) +
                             ") would split a grant of " +
                             std::to_string(grants_[order[n - 1]].count) +
                             " permits; release whole grants, the calling thread's most recent "
                             "first");
            return out;
        }
        // `out` is released from its back: the first chosen goes last into it.
        order.resize(n);
        out.reserve(n);
        for (auto it = order.rbegin(); it != order.rend(); ++it)
            out.push_back(std::move(grants_[*it]));
        std::sort(order.begin(), order.end());
        for (auto it = order.rbegin(); it != order.rend(); ++it)
            grants_.erase(grants_.begin() + static_cast<std::ptrdiff_t>(*it));
        if (grants_.empty()) {
            // The holding period ends: its token fires once the permits are back, and the next
            // grant starts a fresh one.
            ended = std::exchange(period_, std::move(next_period));
        }
    } catch (const std::bad_alloc&) {
        detail::fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    }
    return out;
}

void counting_semaphore::release(std::uint32_t update) {
    std::error_code ec;
    release(update, ec);
    detail::throw_if(ec);
}

void counting_semaphore::release(std::uint32_t update, std::error_code& ec) noexcept {
    std::stop_source ended{std::nostopstate};
    auto grants = detach(update, ended, ec);
    // Outside grants_mutex_: unwatch first (a deliberate release is not a loss), then release,
    // most recent first. A failure goes to the client's error handler from the lease's
    // destructor, and those permits come back when their lease runs out.
    while (!grants.empty()) {
        grants.back().watch.reset();
        grants.pop_back();
    }
    if (ended.stop_possible()) ended.request_stop();
}

void counting_semaphore::set_permits(std::uint32_t permits) {
    std::error_code ec;
    set_permits(permits, ec);
    detail::throw_if(ec);
}

void counting_semaphore::set_permits(std::uint32_t permits, std::error_code& ec) noexcept {
    backend_.set_permits(name_, permits, ec);
    if (!ec) permits_.store(permits);
}

std::uint32_t counting_semaphore::held() const noexcept {
    detail::lock_guard guard(grants_mutex_);
    std::uint64_t sum = 0;
    for (const auto& g : grants_) sum += g.count;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(sum, UINT32_MAX));
}

std::uint64_t counting_semaphore::fencing_token() const {
    detail::lock_guard guard(grants_mutex_);
    if (grants_.empty()) {
        throw error(errc::not_owner,
                    "fencing_token() of semaphore \"" + name_ + "\", which holds no permit");
    }
    return grants_.back().held.fencing_token();
}

std::chrono::milliseconds counting_semaphore::expires_in() const noexcept {
    detail::lock_guard guard(grants_mutex_);
    if (grants_.empty()) return std::chrono::milliseconds::zero();
    auto shortest = std::chrono::milliseconds::max();
    for (const auto& g : grants_) shortest = std::min(shortest, g.held.expires_in());
    return shortest;
}

lock_state counting_semaphore::state() const noexcept {
    detail::lock_guard guard(grants_mutex_);
    auto worst = lock_state::lost;
    if (!grants_.empty()) {
        worst = lock_state::held;
        for (const auto& g : grants_) {
            const auto s = g.held.state();
            if (severity(s) > severity(worst)) worst = s;
        }
    }
    return worst;
}

std::stop_token counting_semaphore::lost_token() const noexcept {
    detail::lock_guard guard(grants_mutex_);
    if (grants_.empty()) return fired_token();
    return period_.get_token();
}

}  // namespace dlock
