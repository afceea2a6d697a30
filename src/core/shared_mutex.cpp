#include <dlock/shared_mutex.hpp>

#include <utility>

#include "core/gate_unlock.hpp"
#include "core/lease_core.hpp"
#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {

namespace {
constexpr lock_request write_request{.kind = lock_kind::write};
constexpr lock_request read_request{.kind = lock_kind::read};
}  // namespace

shared_mutex::shared_mutex(backend& backend, std::string name, lock_options options)
    : backend_(backend), name_(std::move(name)), options_(std::move(options)) {
    std::error_code ec;
    if (name_.empty()) detail::fail(ec, errc::invalid_argument, "lock name is empty");
    if (!ec) detail::validate_lock_options(options_, ec);
    detail::throw_if(ec);
}

shared_mutex::~shared_mutex() {
    lease writer;
    std::unordered_map<std::thread::id, lease> readers;
    {
        detail::lock_guard guard(leases_mutex_);
        writer = std::move(writer_);
        readers.swap(readers_);
    }
    // The leases' destructors release outside leases_mutex_ and never throw.
}

void shared_mutex::refuse_second_share() const {
    if (writer_gate_.owned_by_caller()) {
        throw error(errc::invalid_argument,
                    "shared_mutex \"" + name_ + "\": the calling thread owns the write lock");
    }
    bool holds_share = false;
    {
        detail::lock_guard guard(leases_mutex_);
        holds_share = readers_.contains(std::this_thread::get_id());
    }
    if (holds_share) {
        // With writer preference a second share (or the write lock) would wait behind a writer
        // that waits for our own first share: refuse rather than deadlock.
        throw error(errc::invalid_argument,
                    "shared_mutex \"" + name_ + "\": the calling thread already holds a share");
    }
}

void shared_mutex::lock() {
    // Without a deadline the try_* path never returns false: contention ends the wait only through
    // max_attempts, which it throws (errc::attempts_exhausted).
    [[maybe_unused]] const bool held = try_lock_until_steady(detail::steady::time_point::max());
}

bool shared_mutex::try_lock() { return try_lock_until_steady(detail::steady::time_point::min()); }

bool shared_mutex::try_lock_until_steady(std::chrono::steady_clock::time_point deadline) {
    refuse_second_share();
    switch (writer_gate_.enter(deadline, options_.cancel)) {
        case detail::owner_gate::entry::entered: break;
        case detail::owner_gate::entry::timed_out: return false;
        case detail::owner_gate::entry::canceled:
            throw error(errc::canceled, "write lock of \"" + name_ +
                                            "\" canceled while another thread of this process "
                                            "owned it");
        case detail::owner_gate::entry::already_owner:
            throw error(errc::invalid_argument,
                        "shared_mutex \"" + name_ + "\": the calling thread owns the write lock");
    }
    std::error_code ec;
    auto grant = backend_.acquire_until(name_, write_request, options_, deadline, ec);
    if (ec) {
        writer_gate_.leave();
        if (is_contention(ec) && deadline != detail::steady::time_point::max()) return false;
        detail::throw_if(ec);
    }
    detail::lock_guard guard(leases_mutex_);
    writer_ = std::move(grant);  // empty before: only the gate's owner adopts, once
    return true;
}

// unlock_if_owner takes the slot by reference and touches it only under the mutex it is given;
// the analysis cannot tie a parameter to a mutex, so it is off for this forwarding call only.
void shared_mutex::unlock() noexcept DLOCK_NO_THREAD_SAFETY_ANALYSIS {
    detail::unlock_if_owner(writer_gate_, leases_mutex_, writer_, "shared_mutex", name_);
}

void shared_mutex::lock_shared() {
    [[maybe_unused]] const bool held =
        try_lock_shared_until_steady(detail::steady::time_point::max());
}

bool shared_mutex::try_lock_shared() {
    return try_lock_shared_until_steady(detail::steady::time_point::min());
}

bool shared_mutex::try_lock_shared_until_steady(std::chrono::steady_clock::time_point deadline) {
    refuse_second_share();
    std::error_code ec;
    auto grant = backend_.acquire_until(name_, read_request, options_, deadline, ec);
    if (is_contention(ec) && deadline != detail::steady::time_point::max()) return false;
    detail::throw_if(ec);
    detail::lock_guard guard(leases_mutex_);
    // Only this thread adds under its id, and refuse_second_share() found none: no lease is
    // replaced (and so none is released under the mutex).
    readers_.emplace(std::this_thread::get_id(), std::move(grant));
    return true;
}

void shared_mutex::unlock_shared() noexcept {
    lease held;
    {
        detail::lock_guard guard(leases_mutex_);
        const auto it = readers_.find(std::this_thread::get_id());
        if (it == readers_.end()) return;
        held = std::move(it->second);
        readers_.erase(it);
    }
    // held's destructor releases outside leases_mutex_ and never throws.
}

const lease* shared_mutex::current() const noexcept {
    const auto it = readers_.find(std::this_thread::get_id());
    if (it != readers_.end()) return &it->second;
    if (writer_) return &writer_;
    return nullptr;
}

std::uint64_t shared_mutex::fencing_token() const {
    detail::lock_guard guard(leases_mutex_);
    const auto* held = current();
    if (!held) {
        throw error(errc::not_owner, "fencing_token() of \"" + name_ +
                                         "\", which the calling thread has not locked");
    }
    return held->fencing_token();
}

std::chrono::milliseconds shared_mutex::expires_in() const noexcept {
    detail::lock_guard guard(leases_mutex_);
    const auto* held = current();
    return held ? held->expires_in() : std::chrono::milliseconds::zero();
}

lock_state shared_mutex::state() const noexcept {
    detail::lock_guard guard(leases_mutex_);
    const auto* held = current();
    return held ? held->state() : lock_state::lost;
}

std::stop_token shared_mutex::lost_token() const noexcept {
    detail::lock_guard guard(leases_mutex_);
    const auto* held = current();
    return held ? held->lost_token() : lease().lost_token();
}

}  // namespace dlock
