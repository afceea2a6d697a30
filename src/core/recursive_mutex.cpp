#include <dlock/recursive_mutex.hpp>

#include <optional>
#include <utility>

#include "core/composite_grant.hpp"
#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {

// One thread's grant: a lease per level, all for the same owner token and fencing token (the
// backend's re-entry, lock_request::reenter). levels.front() is the outer grant. Every level's
// lease is renewed by the watchdog and leaves one level when released (docs/lock-family.md); the
// last one deletes the key. lost_token() hands out the set's source, fired at the end.
struct recursive_mutex::owner {
    detail::composite_grant levels;
};

recursive_mutex::recursive_mutex(backend& backend, std::string name, lock_options options)
    : backend_(backend), name_(std::move(name)), options_(std::move(options)) {
    std::error_code ec;
    if (name_.empty()) detail::fail(ec, errc::invalid_argument, "lock name is empty");
    if (!ec) detail::validate_lock_options(options_, ec);
    detail::throw_if(ec);
}

recursive_mutex::~recursive_mutex() {
    decltype(owners_) left;
    {
        detail::lock_guard guard(owners_mutex_);
        left.swap(owners_);
    }
    // ~owner releases each level outside owners_mutex_; failures go to the client's handler.
}

recursive_mutex::owner* recursive_mutex::mine() const {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    return it == owners_.end() ? nullptr : it->second.get();
}

void recursive_mutex::lock() {
    owner* held = mine();
    std::error_code ec;
    auto grant = take(held, detail::steady::time_point::max(), ec);
    detail::throw_if(ec);
    adopt(std::move(grant));
}

bool recursive_mutex::try_lock() {
    return try_lock_until_steady(detail::steady::time_point::min());
}

bool recursive_mutex::try_lock_until_steady(std::chrono::steady_clock::time_point deadline) {
    owner* held = mine();
    std::error_code ec;
    auto grant = take(held, deadline, ec);
    if (is_contention(ec) && !held) return false;
    detail::throw_if(ec);
    adopt(std::move(grant));
    return true;
}

lease recursive_mutex::take(owner* held, std::chrono::steady_clock::time_point deadline,
                            std::error_code& ec) {
    if (!held) {
        return backend_.acquire_until(name_, {.kind = lock_kind::reentrant}, options_, deadline,
                                      ec);
    }
    // Re-entry: one round trip that adds a level to the server's counter for our token, or
    // errc::lock_lost when the server no longer has it (then nothing is taken anew, and the
    // levels still held stay for unlock() to leave, like any lost lease). Only the calling
    // thread changes its own entry, so it may be read outside owners_mutex_.
    auto inner = options_;
    inner.on_lost = {};  // the outer level reports a loss, once
    return backend_.acquire_until(name_,
                                  {.kind = lock_kind::reentrant, .reenter = &held->levels.back()},
                                  inner, deadline, ec);
}

void recursive_mutex::adopt(lease&& grant) {
    detail::lock_guard guard(owners_mutex_);
    const auto id = std::this_thread::get_id();
    const auto it = owners_.find(id);
    std::unique_ptr<owner> fresh;
    owner* o = it != owners_.end() ? it->second.get() : (fresh = std::make_unique<owner>()).get();
    // Everything that may throw comes first, so the map never holds an owner without levels (if
    // it throws, `grant` releases what was just taken).
    o->levels.reserve(1);
    auto relay_of_level = o->levels.watch(grant);
    if (fresh) owners_.emplace(id, std::move(fresh));
    o->levels.add(std::move(grant), std::move(relay_of_level));
}

void recursive_mutex::unlock() noexcept {
    std::optional<detail::composite_grant::detached> level;
    std::unique_ptr<owner> finished;
    {
        detail::lock_guard guard(owners_mutex_);
        const auto it = owners_.find(std::this_thread::get_id());
        if (it == owners_.end()) return;  // not held by this thread: harmless
        auto& o = *it->second;
        level.emplace(o.levels.remove_last());
        if (o.levels.empty()) {
            finished = std::move(it->second);
            owners_.erase(it);
        }
    }
    // Outside owners_mutex_: the relay goes first (the release fires the level's own token, which
    // is not a loss), then the one round trip of the release.
    level.reset();
    // finished (now without levels) fires lost_token() in its destructor: fully unlocked.
}

std::uint64_t recursive_mutex::fencing_token() const {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    if (it == owners_.end()) {
        throw error(errc::not_owner,
                    "fencing_token() of \"" + name_ + "\", which this thread does not hold");
    }
    return it->second->levels.front().fencing_token();
}

std::chrono::milliseconds recursive_mutex::expires_in() const noexcept {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    if (it == owners_.end()) return std::chrono::milliseconds::zero();
    return it->second->levels.expires_in();
}

lock_state recursive_mutex::state() const noexcept {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    if (it == owners_.end()) return lock_state::lost;
    return it->second->levels.state();
}

std::stop_token recursive_mutex::lost_token() const noexcept {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    return it != owners_.end() ? it->second->levels.lost_token() : detail::fired_token();
}

std::size_t recursive_mutex::depth() const noexcept {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    return it == owners_.end() ? 0 : it->second->levels.size();
}

}  // namespace dlock
