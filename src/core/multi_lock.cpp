// dlock::multi_lock: all-or-nothing acquisition of several locks in one global order
// (docs/lock-family.md, "multi-lock").
//
// Why the order prevents deadlock: every multi_lock takes its parts in increasing order of one
// key, (name, backend object), and while it waits for a part it holds only parts with smaller
// keys. A cycle of waiters (A waits for what B holds, B for what ... holds, ... for what A holds)
// would need each waited-for key to be larger than a key its holder waits for, all the way round
// the cycle back to A: impossible in a total order. This is Havender's resource ordering; it
// holds for counted resources (semaphore permits, read shares) too, because each part is
// requested in one acquire.
#include <dlock/multi_lock.hpp>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <utility>

#include "core/composite_grant.hpp"
#include "core/gate_unlock.hpp"
#include "core/lease_core.hpp"
#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {

namespace {

std::string describe(const std::vector<lock_part>& parts, std::size_t index) {
    return "part " + std::to_string(index + 1) + " of " + std::to_string(parts.size()) + " (\"" +
           parts[index].name + "\", " + to_string(parts[index].request.kind) + ")";
}

// The global order: by name, then by backend object. Names come first because they mean the same
// in every process, while a backend's address is only meaningful within one (docs/lock-family.md,
// "multi-lock", says what that implies).
bool ordered_before(const lock_part& a, const lock_part& b) noexcept {
    if (const int c = a.name.compare(b.name); c != 0) return c < 0;
    return std::less<const backend*>{}(&a.service, &b.service);
}

bool same_lock(const lock_part& a, const lock_part& b) noexcept {
    return &a.service == &b.service && a.name == b.name;
}

}  // namespace

// The parts of one acquisition, in the order they were taken (so torn down in reverse order of
// taking, after their loss relays, and the set's lost token fires last: composite_grant), and
// which part each is.
struct multi_lock::grant {
    detail::composite_grant parts;  // parts.part(k) is the lease of caller part taken[k]
    std::vector<std::size_t> taken;

    /// The lease of caller part `i`.
    const lease& of(std::size_t i) const noexcept {
        return parts.part(
            static_cast<std::size_t>(std::find(taken.begin(), taken.end(), i) - taken.begin()));
    }
};

multi_lock::multi_lock(std::vector<lock_part> parts, lock_options options)
    : parts_(std::move(parts)), options_(std::move(options)) {
    std::error_code ec;
    if (parts_.empty()) detail::fail(ec, errc::invalid_argument, "multi_lock: parts is empty");
    for (std::size_t i = 0; !ec && i < parts_.size(); ++i) {
        if (parts_[i].name.empty())
            detail::fail(ec, errc::invalid_argument,
                         "multi_lock: the name of part " + std::to_string(i + 1) + " is empty");
    }
    if (!ec) detail::validate_lock_options(options_, ec);
    order_.resize(parts_.size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::sort(order_.begin(), order_.end(), [this](std::size_t a, std::size_t b) {
        return ordered_before(parts_[a], parts_[b]);
    });
    // Equal keys are adjacent once sorted. Taking one lock twice would wait for itself.
    for (std::size_t k = 1; !ec && k < order_.size(); ++k) {
        const auto first = std::min(order_[k - 1], order_[k]);
        const auto second = std::max(order_[k - 1], order_[k]);
        if (same_lock(parts_[first], parts_[second]))
            detail::fail(ec, errc::invalid_argument,
                         "multi_lock: " + describe(parts_, second) + " repeats part " +
                             std::to_string(first + 1) + ": the same lock on the same backend");
    }
    detail::throw_if(ec);
}

multi_lock::~multi_lock() {
    grant_ptr held;
    {
        detail::lock_guard guard(grant_mutex_);
        held = std::move(grant_);
    }
    // held's destructor releases every part still held, whichever thread locked them.
}

multi_lock::grant_ptr multi_lock::acquire_all(std::chrono::steady_clock::time_point deadline,
                                              std::error_code& ec) {
    ec.clear();
    auto taking = std::make_unique<grant>();
    taking->taken.reserve(parts_.size());
    taking->parts.reserve(parts_.size());
    for (const auto i : order_) {
        const auto& part = parts_[i];
        auto granted = part.service.acquire_until(part.name, part.request, options_, deadline, ec);
        if (ec) {
            // Read the cause's message before releasing: a failed release may overwrite this
            // thread's message slot.
            const auto code = ec;
            const auto why = detail::message_for(ec);
            const auto released = taking->taken.size();
            taking.reset();  // releases the parts taken so far, last first
            detail::fail(ec, code,
                         "multi_lock " + describe(parts_, i) + ": " + why +
                             (released == 0 ? std::string()
                                            : "; the " + std::to_string(released) +
                                                  " part(s) taken before it were released"));
            return nullptr;
        }
        // A part lost already fires the set at once (stop_callback runs the callback in its
        // constructor when the token has already fired), so no loss is missed.
        taking->parts.add(std::move(granted));
        taking->taken.push_back(i);
    }
    return taking;
}

void multi_lock::lock() {
    [[maybe_unused]] const bool held = lock_until(detail::steady::time_point::max(), false);
}

bool multi_lock::try_lock() { return try_lock_until_steady(detail::steady::time_point::min()); }

bool multi_lock::try_lock_until_steady(std::chrono::steady_clock::time_point deadline) {
    return lock_until(deadline, true);
}

bool multi_lock::lock_until(std::chrono::steady_clock::time_point deadline,
                            bool contention_is_false) {
    switch (gate_.enter(deadline, options_.cancel)) {
        case detail::owner_gate::entry::entered: break;
        case detail::owner_gate::entry::timed_out: return false;
        case detail::owner_gate::entry::canceled:
            throw error(errc::canceled,
                        "multi_lock " + describe(parts_, order_.front()) +
                            ": canceled while another thread of this process owned the set");
        case detail::owner_gate::entry::already_owner:
            throw error(errc::invalid_argument, "multi_lock " + describe(parts_, order_.front()) +
                                                    ": the calling thread owns the set already");
    }
    std::error_code ec;
    auto taken = acquire_all(deadline, ec);
    if (ec) {
        gate_.leave();
        if (contention_is_false && is_contention(ec)) return false;
        detail::throw_if(ec);
    }
    adopt(std::move(taken));
    return true;
}

void multi_lock::adopt(grant_ptr taken) noexcept {
    detail::lock_guard guard(grant_mutex_);
    grant_ = std::move(taken);  // empty before: only the gate's owner adopts, once
}

// unlock_if_owner takes the slot by reference and touches it only under the mutex it is given;
// the analysis cannot tie a parameter to a mutex, so it is off for this forwarding call only.
void multi_lock::unlock() noexcept DLOCK_NO_THREAD_SAFETY_ANALYSIS {
    // The first part's client hears of a foreign unlock.
    const auto first_core = [](const grant_ptr& g) noexcept -> std::shared_ptr<detail::lease_core> {
        if (!g || g->parts.empty()) return nullptr;
        return detail::lease_access::shared_core(g->of(0));
    };
    detail::unlock_if_owner(gate_, grant_mutex_, grant_, first_core, "multi_lock", parts_[0].name);
}

std::vector<std::uint64_t> multi_lock::fencing_tokens() const {
    detail::lock_guard guard(grant_mutex_);
    if (!grant_) {
        std::string names;
        for (const auto& part : parts_) names += (names.empty() ? "\"" : ", \"") + part.name + "\"";
        throw error(errc::not_owner,
                    "fencing_tokens() of multi_lock {" + names + "}, which is not locked");
    }
    std::vector<std::uint64_t> tokens(parts_.size());
    for (std::size_t k = 0; k < grant_->taken.size(); ++k)
        tokens[grant_->taken[k]] = grant_->parts.part(k).fencing_token();
    return tokens;
}

std::chrono::milliseconds multi_lock::expires_in() const noexcept {
    detail::lock_guard guard(grant_mutex_);
    return grant_ ? grant_->parts.expires_in() : std::chrono::milliseconds::zero();
}

lock_state multi_lock::state() const noexcept {
    detail::lock_guard guard(grant_mutex_);
    return grant_ ? grant_->parts.state() : lock_state::lost;
}

std::stop_token multi_lock::lost_token() const noexcept {
    detail::lock_guard guard(grant_mutex_);
    return grant_ ? grant_->parts.lost_token() : detail::fired_token();
}

}  // namespace dlock
