#include <dlock/semaphore.hpp>

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/composite_grant.hpp"
#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {

struct counting_semaphore::grant_set {
    struct about {
        std::uint32_t count = 0;
        std::thread::id thread;  // the thread that acquired it
    };
    detail::composite_grant leases;  // in grant order; release() takes from the back
    std::vector<about> info;         // info[i] describes leases.part(i)
};

struct counting_semaphore::detached_grants {
    std::vector<detail::composite_grant::detached> parts;  // released from the back
};

counting_semaphore::counting_semaphore(backend& backend, std::string name, std::uint32_t permits,
                                       lock_options options)
    : backend_(backend),
      name_(std::move(name)),
      options_(std::move(options)),
      permits_(permits),
      grants_(std::make_unique<grant_set>()) {
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
    const grant_set::about about{count, std::this_thread::get_id()};
    for (;;) {
        std::stop_source period;
        {
            detail::lock_guard guard(grants_mutex_);
            period = grants_->leases.lost_source();
        }
        // Watch outside grants_mutex_: a grant already lost runs the callback right here, and that
        // runs the user's callbacks on lost_token(), which may call back into this object.
        auto watch = detail::composite_grant::watch(held, period);
        detail::lock_guard guard(grants_mutex_);
        if (grants_->leases.lost_source() == period) {
            grants_->info.reserve(grants_->info.size() + 1);
            grants_->leases.add(std::move(held), std::move(watch));
            grants_->info.push_back(about);
            return;
        }
        // The last permit was released meanwhile and a new holding period began: watch for it.
        // (`watch` is destroyed after the guard releases grants_mutex_.)
    }
}

std::unique_ptr<counting_semaphore::detached_grants> counting_semaphore::detach(
    std::uint32_t update, std::stop_source& ended, std::error_code& ec) noexcept {
    ec.clear();
    if (update == 0) return nullptr;
    try {
        // Allocated up front: nothing below may fail half-way.
        auto out = std::make_unique<detached_grants>();
        std::stop_source next_period;
        detail::lock_guard guard(grants_mutex_);
        auto& leases = grants_->leases;
        auto& info = grants_->info;
        // release() order: the caller's own grants, then lost ones (already free on the server),
        // then the other threads' live ones; most recent first within each group.
        const auto me = std::this_thread::get_id();
        std::vector<std::size_t> order;
        order.reserve(info.size());
        for (int group = 0; group < 3; ++group) {
            for (std::size_t i = info.size(); i-- > 0;) {
                const int in = info[i].thread == me                         ? 0
                               : leases.part(i).state() == lock_state::lost ? 1
                                                                            : 2;
                if (in == group) order.push_back(i);
            }
        }
        std::uint64_t sum = 0;
        std::size_t n = 0;
        for (; n < order.size() && sum < update; ++n) sum += info[order[n]].count;
        if (sum < update) {
            detail::fail(ec, errc::not_owner,
                         "counting_semaphore \"" + name_ + "\": release(" + std::to_string(update) +
                             ") but this object holds " + std::to_string(sum) + " permits");
            return nullptr;
        }
        if (sum > update) {
            detail::fail(ec, errc::invalid_argument,
                         "counting_semaphore \"" + name_ + "\": release(" + std::to_string(update) +
                             ") would split a grant of " +
                             std::to_string(info[order[n - 1]].count) +
                             " permits; release whole grants, the calling thread's most recent "
                             "first");
            return nullptr;
        }
        // `out` is released from its back: the first chosen goes last into it. Taken out from
        // the highest index down, so the indices still to take stay valid.
        order.resize(n);
        out->parts.reserve(n);
        std::vector<std::size_t> by_index(order);
        std::sort(by_index.begin(), by_index.end());
        std::vector<detail::composite_grant::detached> taken(n);
        for (auto it = by_index.rbegin(); it != by_index.rend(); ++it) {
            const auto rank = static_cast<std::size_t>(std::find(order.begin(), order.end(), *it) -
                                                       order.begin());
            taken[rank] = leases.remove(*it);
            info.erase(info.begin() + static_cast<std::ptrdiff_t>(*it));
        }
        for (auto it = taken.rbegin(); it != taken.rend(); ++it)
            out->parts.push_back(std::move(*it));
        if (leases.empty()) {
            // The holding period ends: its token fires once the permits are back, and the next
            // grant starts a fresh one.
            ended = leases.finish(std::move(next_period));
        }
        return out;
    } catch (const std::bad_alloc&) {
        detail::fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    }
    return nullptr;
}

void counting_semaphore::release(std::uint32_t update) {
    std::error_code ec;
    release(update, ec);
    detail::throw_if(ec);
}

void counting_semaphore::release(std::uint32_t update, std::error_code& ec) noexcept {
    std::stop_source ended{std::nostopstate};
    auto grants = detach(update, ended, ec);
    // Outside grants_mutex_: each grant's relay goes first (a deliberate release is not a loss),
    // then its lease, most recent first. A failure goes to the client's error handler from the
    // lease's destructor, and those permits come back when their lease runs out.
    while (grants && !grants->parts.empty()) grants->parts.pop_back();
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
    for (const auto& g : grants_->info) sum += g.count;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(sum, UINT32_MAX));
}

std::uint64_t counting_semaphore::fencing_token() const {
    detail::lock_guard guard(grants_mutex_);
    if (grants_->leases.empty()) {
        throw error(errc::not_owner,
                    "fencing_token() of semaphore \"" + name_ + "\", which holds no permit");
    }
    return grants_->leases.back().fencing_token();
}

std::chrono::milliseconds counting_semaphore::expires_in() const noexcept {
    detail::lock_guard guard(grants_mutex_);
    return grants_->leases.expires_in();
}

lock_state counting_semaphore::state() const noexcept {
    detail::lock_guard guard(grants_mutex_);
    return grants_->leases.state();
}

std::stop_token counting_semaphore::lost_token() const noexcept {
    detail::lock_guard guard(grants_mutex_);
    return grants_->leases.lost_token();
}

}  // namespace dlock
