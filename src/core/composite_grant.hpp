// One grant made of several leases (recursive_mutex's levels, counting_semaphore's grants,
// multi_lock's parts): the leases, one relay per lease that forwards its loss to the set's own
// stop source, and what the set reports (the shortest expires_in, the worst state).
//
// Teardown order, the same everywhere: a part's relay goes before its lease (a deliberate
// release fires the lease's own lost token, which must not look like a loss of the set), the
// parts go newest first, and the set's source fires last, once for the whole set.
//
// Not thread-safe: the owning lock type guards it. A relay can run user callbacks (the set's
// lost_token() listeners) when it is made for a lease already lost, or when it is destroyed while
// its lease is being lost on another thread (the destructor waits for it): make and drop relays
// with no lock of the owner held (watch(), and the relay inside a `detached` part).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <stop_token>
#include <vector>

#include <dlock/lease.hpp>

namespace dlock::detail {

/// held < uncertain < lost: the state of a set is its worst part's.
int severity(lock_state state) noexcept;
/// The worse of two states.
lock_state worse(lock_state a, lock_state b) noexcept;
/// A token that has already fired (what an empty set hands out).
std::stop_token fired_token() noexcept;

class composite_grant {
public:
    /// Forwards one lease's loss to a set's stop source. It holds a copy of that source (the stop
    /// state is shared), so it stays valid however the set is torn down.
    struct relay_loss {
        std::stop_source target;
        void operator()() noexcept { target.request_stop(); }
    };
    using relay = std::unique_ptr<std::stop_callback<relay_loss>>;

    /// A part taken out of the set. Destroy it with no lock held: the relay goes first (declared
    /// last), then the lease, which releases it.
    struct detached {
        lease part;
        relay watch;
    };

    composite_grant() = default;
    composite_grant(const composite_grant&) = delete;
    composite_grant& operator=(const composite_grant&) = delete;
    /// Relays first, then the parts newest first (each lease's destructor releases it; a failure
    /// goes to that backend's error handler), then the set's source fires. Never throws.
    ~composite_grant();

    /// A relay from `part`'s lost token to `target`. Runs at once if `part` is lost already.
    static relay watch(const lease& part, std::stop_source target);
    /// A relay to this set's current source.
    relay watch(const lease& part) const { return watch(part, lost_); }

    /// Room for `more` parts: after it, add() of that many does not throw.
    void reserve(std::size_t more);
    /// Appends `part` with its relay (from watch()). Throws only std::bad_alloc, and then leaves
    /// both the set and `part` as they were.
    void add(lease&& part, relay watch);
    /// add(part, watch(part)).
    void add(lease&& part);

    /// Takes part `i` out, without releasing it.
    detached remove(std::size_t i) noexcept;
    detached remove_last() noexcept { return remove(parts_.size() - 1); }

    /// Ends the holding period (the set is empty): returns the source to fire once the parts are
    /// back, and starts a fresh one (allocated by the caller beforehand, so this cannot fail).
    std::stop_source finish(std::stop_source fresh) noexcept;

    std::size_t size() const noexcept { return parts_.size(); }
    bool empty() const noexcept { return parts_.empty(); }
    const lease& part(std::size_t i) const noexcept { return parts_[i]; }
    const lease& front() const noexcept { return parts_.front(); }
    const lease& back() const noexcept { return parts_.back(); }
    /// The source the relays feed (a copy: same stop state).
    std::stop_source lost_source() const noexcept { return lost_; }

    /// The shortest time left among the parts; 0 when empty.
    std::chrono::milliseconds expires_in() const noexcept;
    /// The worst state among the parts; lost when empty.
    lock_state state() const noexcept;
    /// Fires when any part is lost and when the set ends; already fired when empty.
    std::stop_token lost_token() const noexcept;

private:
    std::vector<lease> parts_;   // in the order added
    std::vector<relay> relays_;  // relays_[i] watches parts_[i]
    std::stop_source lost_;
};

}  // namespace dlock::detail
