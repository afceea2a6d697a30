#include <dlock/mutex.hpp>

#include "core/gate_unlock.hpp"
#include "core/lease_core.hpp"
#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {

lease backend::acquire(std::string_view name, const lock_options& options) {
    std::error_code ec;
    auto grant = acquire(name, options, ec);
    detail::throw_if(ec);
    return grant;
}

lease backend::acquire(std::string_view name, const lock_options& options,
                       std::error_code& ec) noexcept {
    return acquire_until(name, options, detail::deadline_after(detail::steady::now(), options.wait),
                         ec);
}

lease backend::acquire(std::string_view name, const lock_request& request,
                       const lock_options& options) {
    std::error_code ec;
    auto grant = acquire(name, request, options, ec);
    detail::throw_if(ec);
    return grant;
}

lease backend::acquire(std::string_view name, const lock_request& request,
                       const lock_options& options, std::error_code& ec) noexcept {
    return acquire_until(name, request, options,
                         detail::deadline_after(detail::steady::now(), options.wait), ec);
}

const char* to_string(lock_kind kind) noexcept {
    switch (kind) {
        case lock_kind::exclusive: return "exclusive";
        case lock_kind::reentrant: return "reentrant";
        case lock_kind::fair: return "fair";
        case lock_kind::read: return "read";
        case lock_kind::write: return "write";
        case lock_kind::permits: return "permits";
    }
    return "unknown";
}

void backend::set_permits(std::string_view name, std::uint32_t permits) {
    std::error_code ec;
    set_permits(name, permits, ec);
    detail::throw_if(ec);
}

void backend::set_permits(std::string_view name, std::uint32_t, std::error_code& ec) noexcept {
    detail::fail(ec, errc::unsupported,
                 "semaphore \"" + std::string(name) + "\": this backend has no semaphore");
}

std::string backend::record_once(std::string_view name, std::string_view,
                                 std::error_code& ec) noexcept {
    detail::fail(ec, errc::unsupported,
                 "record_once(\"" + std::string(name) + "\"): not supported by this backend");
    return {};
}

mutex::mutex(backend& backend, std::string name, lock_options options)
    : mutex(backend, std::move(name), std::move(options), lock_request{}) {}

mutex::mutex(backend& backend, std::string name, lock_options options, lock_request request)
    : backend_(backend), request_(request), name_(std::move(name)), options_(std::move(options)) {
    std::error_code ec;
    if (name_.empty()) detail::fail(ec, errc::invalid_argument, "lock name is empty");
    if (!ec) detail::validate_lock_options(options_, ec);
    detail::throw_if(ec);
}

mutex::~mutex() {
    lease held;
    {
        detail::lock_guard guard(lease_mutex_);
        held = std::move(lease_);
    }
    // held's destructor releases whatever is still held, whichever thread locked it.
}

void mutex::lock() {
    [[maybe_unused]] const bool held = lock_until(detail::steady::time_point::max(), false);
}

bool mutex::try_lock() { return try_lock_until_steady(detail::steady::time_point::min()); }

bool mutex::try_lock_until_steady(std::chrono::steady_clock::time_point deadline) {
    return lock_until(deadline, true);
}

bool mutex::lock_until(std::chrono::steady_clock::time_point deadline, bool contention_is_false) {
    switch (gate_.enter(deadline, options_.cancel)) {
        case detail::owner_gate::entry::entered: break;
        case detail::owner_gate::entry::timed_out: return false;
        case detail::owner_gate::entry::canceled:
            throw error(errc::canceled, "lock of \"" + name_ +
                                            "\" canceled while another thread of this process "
                                            "owned the mutex");
        case detail::owner_gate::entry::already_owner:
            throw error(errc::invalid_argument,
                        "mutex \"" + name_ +
                            "\": the calling thread owns it already (use recursive_mutex to lock "
                            "again)");
    }
    std::error_code ec;
    auto grant = backend_.acquire_until(name_, request_, options_, deadline, ec);
    if (ec) {
        gate_.leave();
        if (contention_is_false && is_contention(ec)) return false;
        detail::throw_if(ec);
    }
    adopt(std::move(grant));
    return true;
}

void mutex::adopt(lease&& grant) {
    detail::lock_guard guard(lease_mutex_);
    lease_ = std::move(grant);  // empty before: only the gate's owner adopts, once
}

// unlock_if_owner takes the slot by reference and touches it only under the mutex it is given;
// the analysis cannot tie a parameter to a mutex, so it is off for this forwarding call only.
void mutex::unlock() noexcept DLOCK_NO_THREAD_SAFETY_ANALYSIS {
    detail::unlock_if_owner(gate_, lease_mutex_, lease_, "mutex", name_);
}

std::uint64_t mutex::fencing_token() const {
    detail::lock_guard guard(lease_mutex_);
    if (!lease_)
        throw error(errc::not_owner, "fencing_token() of \"" + name_ + "\", which is not locked");
    return lease_.fencing_token();
}

std::chrono::milliseconds mutex::expires_in() const noexcept {
    detail::lock_guard guard(lease_mutex_);
    return lease_.expires_in();
}

lock_state mutex::state() const noexcept {
    detail::lock_guard guard(lease_mutex_);
    return lease_.state();
}

std::stop_token mutex::lost_token() const noexcept {
    detail::lock_guard guard(lease_mutex_);
    return lease_.lost_token();
}

}  // namespace dlock
