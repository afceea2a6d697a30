#include <dlock/lease.hpp>

#include <string>

#include "core/lease_core.hpp"
#include "core/status.hpp"

namespace dlock {

lease::lease() noexcept = default;
lease::lease(std::shared_ptr<detail::lease_core> core) noexcept : core_(std::move(core)) {}
lease::lease(lease&&) noexcept = default;

lease& lease::operator=(lease&& other) noexcept {
    if (this != &other) {
        lease old(std::move(*this));  // released by its destructor, before taking over
        core_ = std::move(other.core_);
    }
    return *this;
}

lease::~lease() {
    if (!core_) return;
    if (core_->forked()) {
        // A forked child's copy of its parent's grant: the parent still holds the lock and
        // releases it itself. Nothing to tell anyone (docs/lock-family.md, "fork").
        core_.reset();
        return;
    }
    const auto core = core_;
    std::error_code ec;
    release(ec);
    if (!ec) return;
    // Nobody to throw to: the client's error handler hears of it.
    try {
        if (ec == errc::lock_lost) {
            core->owner().report_error(ec,
                                       "release of \"" + core->name() +
                                           "\": the lock was no longer ours; nothing was deleted");
        } else {
            core->owner().report_error(ec, "release of \"" + core->name() + "\" failed (" +
                                               detail::message_for(ec) +
                                               "); it expires with its lease");
        }
    } catch (...) {
        core->owner().report_error(ec, "release failed");
    }
}

lease::operator bool() const noexcept { return core_ != nullptr; }

const std::string& lease::name() const noexcept {
    static const std::string empty;
    return core_ ? core_->name() : empty;
}

std::uint64_t lease::fencing_token() const {
    if (!core_) throw error(errc::not_owner, "fencing_token() of an empty lease");
    return core_->fencing_token();
}

std::chrono::milliseconds lease::expires_in() const noexcept {
    if (!core_) return std::chrono::milliseconds::zero();
    const auto now = detail::steady::now();
    if (core_->state(now) == lock_state::lost) return std::chrono::milliseconds::zero();
    return detail::remaining(now, core_->valid_until());
}

lock_state lease::state() const noexcept {
    return core_ ? core_->state(detail::steady::now()) : lock_state::lost;
}

dlock::lost_reason lease::lost_reason() const noexcept {
    return core_ ? core_->reason(detail::steady::now()) : dlock::lost_reason::released;
}

std::stop_token lease::lost_token() const noexcept {
    if (core_ && !core_->forked()) return core_->lost_token();
    std::stop_source fired;
    fired.request_stop();
    return fired.get_token();
}

void lease::release() {
    std::error_code ec;
    release(ec);
    detail::throw_if(ec);
}

void lease::release(std::error_code& ec) noexcept {
    ec.clear();
    if (!core_) return detail::fail(ec, errc::not_owner, "release() of an empty lease");
    const auto core = std::move(core_);
    if (core->forked()) {
        return detail::fail(ec, errc::not_owner,
                            "release of \"" + core->name() +
                                "\" in a forked child: the lock belongs to the parent process, "
                                "which still holds it; nothing was released");
    }
    core->owner().release(*core, ec);
    core->finish_release(ec);
}

}  // namespace dlock
