#include <dlock/recursive_mutex.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/status.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

namespace dlock {

namespace {

/// Fires an owner's combined lost token when one of its levels' tokens fires.
struct relay {
    mutable std::stop_source target;
    void operator()() const noexcept { target.request_stop(); }
};

using watch = std::stop_callback<relay>;

int severity(lock_state s) noexcept {
    switch (s) {
        case lock_state::held: return 0;
        case lock_state::uncertain: return 1;
        case lock_state::lost: return 2;
    }
    return 2;
}

}  // namespace

// One thread's grant: a lease per level, all for the same owner token and fencing token (the
// backend's re-entry, lock_request::reenter). levels[0] is the outer grant. Every level's lease
// is renewed by the watchdog and leaves one level when released (docs/lock-family.md).
struct recursive_mutex::owner {
    std::stop_source lost;  // what lost_token() hands out: fed by every level, fired at the end
    std::vector<lease> levels;
    std::vector<std::unique_ptr<watch>> watches;  // watches[i] relays levels[i]'s lost token

    ~owner() {
        // Relays first: a deliberate release fires each level's own token, which is not a loss.
        watches.clear();
        levels.clear();  // each releases one level; the last one deletes the key
        lost.request_stop();
    }
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
    o->levels.reserve(o->levels.size() + 1);
    o->watches.reserve(o->watches.size() + 1);
    auto relay_of_level = std::make_unique<watch>(grant.lost_token(), relay{o->lost});
    if (fresh) owners_.emplace(id, std::move(fresh));
    o->watches.push_back(std::move(relay_of_level));
    o->levels.push_back(std::move(grant));
}

void recursive_mutex::unlock() noexcept {
    std::unique_ptr<watch> relay_of_level;
    lease level;
    std::unique_ptr<owner> finished;
    {
        detail::lock_guard guard(owners_mutex_);
        const auto it = owners_.find(std::this_thread::get_id());
        if (it == owners_.end()) return;  // not held by this thread: harmless
        auto& o = *it->second;
        relay_of_level = std::move(o.watches.back());
        o.watches.pop_back();
        level = std::move(o.levels.back());
        o.levels.pop_back();
        if (o.levels.empty()) {
            finished = std::move(it->second);
            owners_.erase(it);
        }
    }
    relay_of_level.reset();  // before the release, which fires the level's own token
    {
        const lease released = std::move(level);  // one round trip, outside owners_mutex_
    }
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
    auto left = std::chrono::milliseconds::max();
    for (const auto& level : it->second->levels) left = std::min(left, level.expires_in());
    return left;
}

lock_state recursive_mutex::state() const noexcept {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    if (it == owners_.end()) return lock_state::lost;
    auto worst = lock_state::held;
    for (const auto& level : it->second->levels) {
        const auto s = level.state();
        if (severity(s) > severity(worst)) worst = s;
    }
    return worst;
}

std::stop_token recursive_mutex::lost_token() const noexcept {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    if (it != owners_.end()) return it->second->lost.get_token();
    std::stop_source fired;
    fired.request_stop();
    return fired.get_token();
}

std::size_t recursive_mutex::depth() const noexcept {
    detail::lock_guard guard(owners_mutex_);
    const auto it = owners_.find(std::this_thread::get_id());
    return it == owners_.end() ? 0 : it->second->levels.size();
}

}  // namespace dlock
