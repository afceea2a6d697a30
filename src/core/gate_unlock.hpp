// The unlock() of a lock object shared by the threads of a process through an owner_gate
// (dlock::mutex, the write side of dlock::shared_mutex, dlock::multi_lock), in one place: only the
// thread that owns the gate releases, so an unlock() can never release another thread's grant.
#pragma once

#include <dlock/detail/owner_gate.hpp>

#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "core/lease_core.hpp"

namespace dlock::detail {

/// When the calling thread owns `gate`: moves the grant out of `slot` under `slot_mutex`, releases
/// it (destroys it) outside that mutex — failures go to the client's error handler, and a loss
/// callback that calls back into the object cannot deadlock — and only then leaves the gate, so the
/// next thread of this process takes its turn after the release. Otherwise nothing is released:
/// releasing another thread's grant would let another client in while that thread is inside; if
/// `slot` holds a grant, `core_of(slot)` (called under `slot_mutex`; a null pointer: none) names
/// the client whose error handler is told (report_foreign_unlock, `kind` object `name`).
/// `Grant` is default-constructible (empty) and movable. Never throws.
template <class Grant, class CoreOf>
void unlock_if_owner(owner_gate& gate, detail::mutex& slot_mutex, Grant& slot, CoreOf core_of,
                     std::string_view kind, std::string_view name) noexcept {
    Grant held{};
    std::shared_ptr<lease_core> others;
    const bool owner = gate.owned_by_caller();
    {
        detail::lock_guard guard(slot_mutex);
        if (owner) {
            held = std::move(slot);
        } else {
            others = core_of(std::as_const(slot));
        }
    }
    if (!owner) {
        if (others) report_foreign_unlock(others->owner(), kind, name);
        return;
    }
    { const Grant released = std::move(held); }
    gate.leave();
}

/// unlock_if_owner for a grant that is one dlock::lease.
inline void unlock_if_owner(owner_gate& gate, detail::mutex& slot_mutex, lease& slot,
                            std::string_view kind, std::string_view name) noexcept {
    unlock_if_owner(
        gate, slot_mutex, slot,
        [](const lease& l) noexcept { return lease_access::shared_core(l); }, kind, name);
}

}  // namespace dlock::detail
