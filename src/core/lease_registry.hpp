// The leases a backend's background thread looks after, ordered by when each next needs it: a
// min-heap of due times, so a wake-up costs O(k log n) for the k leases due, not a scan of all n
// (10,000 renewing locks cost the thread only their renewals). Free of I/O and of the clock: the
// caller passes `now`.
//
// Each tracked lease has one due time, never later than its valid_until(): its next renewal, a
// retry after a failed renewal, or (no renewal left: fixed lease, max_hold reached) the moment it
// expires. due(now) takes out the leases whose time has come (renew them, then schedule() each
// again) and the ones already expired (lose them). Entries are weak: a lease destroyed or released
// meanwhile is dropped on the way.
//
// Not thread-safe: the owner guards it with its own mutex. It never calls into a lease except
// to read it (valid_until, released, plan): losing leases is left to the caller, with no lock
// held (lose() runs user callbacks).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/lease_core.hpp"
#include "core/time.hpp"

namespace dlock::detail {

class lease_registry {
public:
    /// A lease whose renewal time has come; `extend_once` as given to track().
    struct due_lease {
        std::shared_ptr<lease_core> lease;
        bool extend_once = false;
    };
    struct due_batch {
        std::vector<due_lease> renew;                   ///< out of the schedule until schedule()
        std::vector<std::shared_ptr<lease_core>> lost;  ///< expired: untracked, for lose()
    };

    /// Starts tracking `lease`, first due at `due` (clamped to its valid_until()). `extend_once`:
    /// a lease to renew once even if its plan does not renew (a hand-off grant that carries only
    /// the short hand-off lease). Tracking a lease again replaces its entry. Returns true when
    /// `due` is now the earliest of all: a sleeping background thread must be woken.
    bool track(const std::shared_ptr<lease_core>& lease, steady::time_point due,
               bool extend_once = false);
    /// Stops tracking (release). false if it was not tracked.
    bool untrack(const lease_core* lease) noexcept;
    bool tracked(const lease_core* lease) const noexcept {
        std::uint32_t index = 0;
        return find(lease, index);
    }

    /// Takes out every lease due by `now`: expired ones (now >= valid_until) are untracked and
    /// returned in `lost`; the others are returned in `renew` and stay tracked but unscheduled
    /// until schedule(). A lease is due from plan().every / 8 before its time, so leases falling
    /// due close together share one renewal round; the heap is read in due order and stops at the
    /// first lease not yet due by that rule.
    due_batch due(steady::time_point now);
    /// Sets the next due time of a tracked lease (after its renewal's outcome), clamped to its
    /// valid_until(); `extend_once` is cleared when `renewed` is true. false if it is no longer
    /// tracked (released meanwhile).
    bool schedule(const lease_core* lease, steady::time_point due, bool renewed = false);

    /// The earliest due time of the scheduled leases; max() when none.
    steady::time_point next_due();
    /// The earliest valid_until() of every tracked lease, scheduled or out for renewal, as of its
    /// last track() or schedule(); max() when none. A renewal round must not block past it, or
    /// that lease's loss would be reported late.
    steady::time_point earliest_deadline();

    /// Untracks everything and returns the leases still alive and not released (to lose them).
    std::vector<std::shared_ptr<lease_core>> lose_all();

    std::size_t size() const noexcept { return index_.size(); }
    /// Heap slots, live and stale (for tests: stale slots are compacted away).
    std::size_t heap_slots() const noexcept { return due_heap_.size() + deadline_heap_.size(); }

private:
    struct entry {
        std::weak_ptr<lease_core> lease;
        const lease_core* key = nullptr;  // nullptr: a free entry
        std::uint64_t generation = 0;  // bumped by every track/schedule: older heap slots are stale
        steady::time_point due = steady::time_point::max();
        steady::time_point deadline = steady::time_point::max();
        bool scheduled = false;
        bool extend_once = false;
    };
    struct slot {
        steady::time_point at;
        std::uint32_t index;  // into entries_
        std::uint64_t generation;
    };
    struct later {
        bool operator()(const slot& a, const slot& b) const noexcept { return a.at > b.at; }
    };

    /// Sets `index` to the entry of `lease`; false when it is not tracked. Remembers the last
    /// answer: a renewal round asks about the same lease twice in a row (tracked(), schedule()).
    bool find(const lease_core* lease, std::uint32_t& index) const noexcept;
    /// Frees the entry at `index` (untrack, loss): its heap slots go stale.
    void erase(std::uint32_t index) noexcept;
    void push(std::vector<slot>& heap, slot s);
    void pop(std::vector<slot>& heap);
    /// Drops stale slots from the top of `heap`; `due_heap` selects which field they must match.
    /// Returns the entry of the live top, or nullptr when the heap is empty.
    entry* clean_top(std::vector<slot>& heap, bool due_heap);
    /// Rebuilds both heaps from the live entries once stale slots outnumber them.
    void compact_if_needed();

    // The entries sit in one vector, reused through free_, and heap slots name them by index: a
    // renewal costs no hash lookup to check a slot, only to find a lease by its address.
    std::unordered_map<const lease_core*, std::uint32_t> index_;
    std::vector<entry> entries_;
    std::vector<std::uint32_t> free_;  // capacity kept >= entries_.size(): erase() cannot throw
    mutable const lease_core* last_key_ = nullptr;  // find()'s last answer
    mutable std::uint32_t last_index_ = 0;
    std::vector<slot> due_heap_;       // scheduled entries by due time
    std::vector<slot> deadline_heap_;  // every entry by valid_until
    std::uint64_t generation_ = 0;
};

}  // namespace dlock::detail
