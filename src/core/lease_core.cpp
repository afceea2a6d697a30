#include "core/lease_core.hpp"

#include <exception>
#include <utility>

namespace dlock::detail {

lease_core::lease_core(std::shared_ptr<lease_owner> owner, std::string name, std::string token,
                       std::uint64_t fencing_token, const lock_options& options,
                       steady::time_point granted, steady::time_point valid_until, lock_kind kind)
    : owner_(std::move(owner)),
      name_(std::move(name)),
      token_(std::move(token)),
      fencing_token_(fencing_token),
      kind_(kind),
      plan_(make_renewal_plan(options)),
      granted_(granted),
      on_lost_(options.on_lost),
      valid_until_(valid_until.time_since_epoch().count()) {}

steady::time_point lease_core::valid_until() const noexcept {
    return steady::time_point(steady::duration(valid_until_.load()));
}

lock_state lease_core::state(steady::time_point now) const noexcept {
    const auto s = state_.load();
    if (s == lock_state::lost || now >= valid_until() || forked()) return lock_state::lost;
    return s;
}

void lease_core::renewed(steady::time_point new_valid_until) noexcept {
    if (state_.load() == lock_state::lost) return;
    // Exactly what the renewal proves, also when it is shorter than before: the renewal set the
    // server's expiry to its own lease (a hand-off's 2 s grant renewed with a 1 s lease expires
    // after 1 s). Renewals of one lease are sequential, so no older reply arrives after it.
    valid_until_.store(new_valid_until.time_since_epoch().count());
    auto expected = lock_state::uncertain;
    state_.compare_exchange_strong(expected, lock_state::held);
}

void lease_core::renewal_failed() noexcept {
    auto expected = lock_state::held;
    state_.compare_exchange_strong(expected, lock_state::uncertain);
}

bool lease_core::lose(std::error_code why) noexcept {
    if (state_.exchange(lock_state::lost) == lock_state::lost) return false;
    lost_.request_stop();
    owner_->notify({event_kind::lost, name_, fencing_token_, why, steady::now()});
    if (on_lost_ && !released_.load()) {
        try {
            on_lost_(why);
        } catch (const std::exception& e) {
            owner_->report_error(
                make_error_code(errc::lock_lost),
                std::string("on_lost callback of \"") + name_ + "\" threw: " + e.what());
        } catch (...) {
            owner_->report_error(
                make_error_code(errc::lock_lost),
                "on_lost callback of \"" + name_ + "\" threw a non-standard exception");
        }
    }
    return true;
}

bool lease_core::mark_released() noexcept {
    if (released_.exchange(true)) return false;
    state_.store(lock_state::lost);
    lost_.request_stop();
    return true;
}

void report_foreign_unlock(lease_owner& owner, std::string_view kind,
                           std::string_view name) noexcept {
    try {
        owner.report_error(make_error_code(errc::not_owner),
                           "unlock() of " + std::string(kind) + " \"" + std::string(name) +
                               "\" from a thread that does not own it; nothing was released");
    } catch (...) {
        owner.report_error(make_error_code(errc::not_owner),
                           "unlock() from a thread that does not own the lock");
    }
}

}  // namespace dlock::detail
