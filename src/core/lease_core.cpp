#include "core/lease_core.hpp"

#include <algorithm>
#include <exception>
#include <utility>

namespace dlock::detail {

lease_core::lease_core(std::shared_ptr<lease_owner> owner, std::string name, std::string token,
                       std::uint64_t fencing_token, const lock_options& options,
                       steady::time_point granted, steady::time_point valid_until, lock_kind kind,
                       bool after_wait)
    : owner_(std::move(owner)),
      name_(std::move(name)),
      token_(std::move(token)),
      fencing_token_(fencing_token),
      kind_(kind),
      plan_(make_renewal_plan(options)),
      granted_(granted),
      after_wait_(after_wait),
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

bool lease_core::renewal_failed() noexcept {
    auto expected = lock_state::held;
    return state_.compare_exchange_strong(expected, lock_state::uncertain);
}

void lease_core::report_renewal_failed() noexcept {
    owner_->notify({event_kind::renewal_failed, name_, fencing_token_, {}, steady::now()});
}

lost_reason lease_core::expiry_reason() const noexcept {
    if (plan_.max_hold == forever) return lost_reason::expired;
    // The last renewal asked for exactly what was left before granted + max_hold, so validity
    // ends within one drift margin of the cap (ZooKeeper: of the cap's own margin).
    const auto margin = drift_for(std::max(plan_.lease, plan_.max_hold)) + milliseconds(1);
    const auto cap = deadline_after(granted_, plan_.max_hold);
    return valid_until() + margin >= cap ? lost_reason::max_hold : lost_reason::expired;
}

lost_reason lease_core::reason(steady::time_point now) const noexcept {
    if (const auto r = reason_.load(); r != lost_reason::none) return r;
    if (state(now) != lock_state::lost) return lost_reason::none;
    return released_.load() ? lost_reason::released : expiry_reason();
}

void lease_core::note_loss(lost_reason reason) noexcept {
    auto r = reason_.load();
    while ((r == lost_reason::none || r == lost_reason::released) &&
           !reason_.compare_exchange_weak(r, reason)) {
    }
}

void lease_core::finish_release(std::error_code ec) noexcept {
    if (ended_.exchange(true)) return;
    const auto now = steady::now();
    if (ec == errc::lock_lost) {
        auto r = reason_.load();
        if (r == lost_reason::none || r == lost_reason::released) r = lost_reason::deleted;
        owner_->notify({event_kind::lost, name_, fencing_token_, ec, now, granted_, r});
        return;
    }
    // Also when the server did not confirm (ec set): the grant is ours no longer; it expires there.
    owner_->notify(
        {event_kind::released, name_, fencing_token_, ec, now, granted_, lost_reason::released});
}

bool lease_core::lose(std::error_code why, lost_reason reason) noexcept {
    if (state_.exchange(lock_state::lost) == lock_state::lost) return false;
    if (reason == lost_reason::none) reason = expiry_reason();
    reason_.store(reason);
    lost_.request_stop();
    if (!ended_.exchange(true)) {
        owner_->notify(
            {event_kind::lost, name_, fencing_token_, why, steady::now(), granted_, reason});
    }
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
    auto none = lost_reason::none;
    reason_.compare_exchange_strong(none, lost_reason::released);
    state_.store(lock_state::lost);
    lost_.request_stop();
    return true;
}

acquire_call::acquire_call(lease_owner& owner, std::string_view name,
                           const std::error_code& ec) noexcept
    : owner_(owner), name_(name), ec_(ec), frame_{steady::now(), false, current_acquire()} {
    current_acquire() = &frame_;
}

acquire_call::~acquire_call() {
    current_acquire() = frame_.outer;
    if (!ec_) return;
    lock_event gave_up{event_kind::gave_up, name_, 0, ec_, steady::now(), frame_.started};
    gave_up.waited = frame_.waited;
    owner_.notify(gave_up);
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
