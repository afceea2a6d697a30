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

#include "core/gate_unlock.hpp"
#include "core/lease_core.hpp"
#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {

namespace {

// Relays one part's loss to the multi_lock's own stop source. It holds a copy of that source (the
// stop state is shared), so it stays valid however the grant is torn down.
struct relay_loss {
    std::stop_source target;
    void operator()() noexcept { target.request_stop(); }
};

int severity(lock_state state) noexcept {
    switch (state) {
        case lock_state::held: return 0;
        case lock_state::uncertain: return 1;
        case lock_state::lost: return 2;
    }
    return 2;
}

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

struct multi_lock::grant {
    explicit grant(std::size_t count) : leases(count) {}
    grant(const grant&) = delete;
    grant& operator=(const grant&) = delete;

    // Tears down in the order that keeps the observers consistent: the watchers go first (they
    // observe the leases, and a deliberate release must not look like a loss part-way through),
    // then the leases in reverse order of taking, then lost fires once for the whole set.
    // Never throws: a failed release goes to that backend's error handler (lease::~lease).
    ~grant() {
        watchers.clear();
        for (auto it = taken.rbegin(); it != taken.rend(); ++it)
            lease dropped(std::move(leases[*it]));
        lost.request_stop();
    }

    std::vector<lease> leases;       // in the caller's order of parts; empty until taken
    std::vector<std::size_t> taken;  // indices into leases, in the order they were taken
    std::stop_source lost;           // fires when any part is lost, and on release
    // One per part; destroyed before the leases (see ~grant). A stop_callback is neither movable
    // nor copyable, hence the indirection.
    std::vector<std::unique_ptr<std::stop_callback<relay_loss>>> watchers;
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
    auto taking = std::make_unique<grant>(parts_.size());
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
        taking->leases[i] = std::move(granted);
        taking->taken.push_back(i);
    }
    // A part lost before its watcher exists fires the set at once (stop_callback runs the
    // callback in its constructor when the token has already fired), so no loss is missed.
    for (const auto& part_lease : taking->leases) {
        taking->watchers.push_back(std::make_unique<std::stop_callback<relay_loss>>(
            part_lease.lost_token(), relay_loss{taking->lost}));
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
        if (!g || g->leases.empty()) return nullptr;
        return detail::lease_access::shared_core(g->leases.front());
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
    std::vector<std::uint64_t> tokens;
    tokens.reserve(grant_->leases.size());
    for (const auto& part_lease : grant_->leases) tokens.push_back(part_lease.fencing_token());
    return tokens;
}

std::chrono::milliseconds multi_lock::expires_in() const noexcept {
    detail::lock_guard guard(grant_mutex_);
    if (!grant_) return std::chrono::milliseconds::zero();
    auto least = std::chrono::milliseconds::max();
    for (const auto& part_lease : grant_->leases) least = std::min(least, part_lease.expires_in());
    return least;
}

lock_state multi_lock::state() const noexcept {
    detail::lock_guard guard(grant_mutex_);
    if (!grant_) return lock_state::lost;
    auto worst = lock_state::held;
    for (const auto& part_lease : grant_->leases) {
        const auto s = part_lease.state();
        if (severity(s) > severity(worst)) worst = s;
    }
    return worst;
}

std::stop_token multi_lock::lost_token() const noexcept {
    detail::lock_guard guard(grant_mutex_);
    if (grant_) return grant_->lost.get_token();
    std::stop_source fired;
    fired.request_stop();
    return fired.get_token();
}

}  // namespace dlock
