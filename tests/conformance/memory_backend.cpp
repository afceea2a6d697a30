#include "memory_backend.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <dlock/error.hpp>

#include "core/lease_core.hpp"
#include "core/status.hpp"
#include "core/validate.hpp"

namespace dlock::test {

namespace {

using steady = std::chrono::steady_clock;

// The kinds that may share one name's state.
enum class family { exclusive, reentrant, fair, read_write, permits };

family family_of(lock_kind kind) {
    switch (kind) {
        case lock_kind::exclusive: return family::exclusive;
        case lock_kind::reentrant: return family::reentrant;
        case lock_kind::fair: return family::fair;
        case lock_kind::read:
        case lock_kind::write: return family::read_write;
        case lock_kind::permits: return family::permits;
    }
    return family::exclusive;
}

struct grant {
    std::weak_ptr<detail::lease_core> core;
    const detail::lease_core* id = nullptr;
    std::string owner;  // the owner token: the levels of one reentrant owner share it
    lock_kind kind = lock_kind::exclusive;
    std::uint32_t count = 1;
    bool renew = true;
    std::chrono::milliseconds lease{};
    steady::time_point valid_until{};
    steady::time_point hold_end{};  // max_hold
};

struct name_state {
    family fam = family::exclusive;
    std::uint64_t fence = 0;
    std::uint32_t permits = 0;  // 0: not set yet
    std::vector<grant> grants;
    std::deque<std::uint64_t> queue;  // tickets of the fair / write waiters, first come first
    bool in_use() const { return !grants.empty() || !queue.empty(); }
};

}  // namespace

struct memory_backend::state final : detail::lease_owner {
    std::mutex mutex;
    std::condition_variable_any changed;  // any grant, release, expiry or set_permits
    std::map<std::string, name_state, std::less<>> names;
    std::map<std::string, std::string, std::less<>> records;  // record_once
    std::uint64_t next_ticket = 0;
    std::uint64_t next_owner = 0;
    bool stopping = false;
    std::uint64_t generation = 0;  // bumped (under mutex) on every change waiters care about

    void changed_locked() {
        ++generation;
        changed.notify_all();
    }

    void release(detail::lease_core& lease, std::error_code& ec) noexcept override {
        ec.clear();
        {
            std::lock_guard lock(mutex);
            auto it = names.find(lease.name());
            bool found = false;
            if (it != names.end()) {
                auto& grants = it->second.grants;
                const auto g = std::find_if(grants.begin(), grants.end(),
                                            [&](const grant& x) { return x.id == &lease; });
                if (g != grants.end()) {
                    grants.erase(g);
                    found = true;
                    changed_locked();
                }
            }
            if (!found) {
                detail::fail(ec, errc::lock_lost,
                             "memory backend: \"" + lease.name() + "\" is no longer held");
                return;
            }
        }
        lease.mark_released();
    }
    void report_error(std::error_code, std::string_view) noexcept override {}
    void notify(const lock_event&) noexcept override {}

    // Renews the grants that renew, and expires the others; fires loss outside the mutex.
    void tick() {
        std::vector<std::shared_ptr<detail::lease_core>> lost;
        std::vector<std::pair<std::shared_ptr<detail::lease_core>, steady::time_point>> renewed;
        {
            std::lock_guard lock(mutex);
            const auto now = steady::now();
            for (auto& [name, s] : names) {
                auto& grants = s.grants;
                for (auto g = grants.begin(); g != grants.end();) {
                    auto core = g->core.lock();
                    if (core && g->renew && now < g->hold_end) {
                        const auto next = std::min(now + g->lease, g->hold_end);
                        if (next > g->valid_until) {
                            g->valid_until = next;
                            renewed.emplace_back(core, next);
                        }
                    }
                    if (!core || now >= g->valid_until) {
                        if (core) lost.push_back(std::move(core));
                        g = grants.erase(g);
                        changed_locked();
                        continue;
                    }
                    ++g;
                }
            }
        }
        for (auto& [core, until] : renewed) core->renewed(until);
        for (auto& core : lost) core->lose(make_error_code(errc::lock_lost));
    }
};

memory_backend::memory_backend() : state_(std::make_shared<state>()) {
    auto s = state_;
    watchdog_ = std::thread([s] {
        std::unique_lock lock(s->mutex);
        while (!s->stopping) {
            lock.unlock();
            s->tick();
            lock.lock();
            s->changed.wait_for(lock, std::chrono::milliseconds(5), [&] { return s->stopping; });
        }
    });
}

memory_backend::~memory_backend() {
    {
        std::lock_guard lock(state_->mutex);
        state_->stopping = true;
        state_->changed_locked();
    }
    watchdog_.join();
}

lease memory_backend::acquire_until(std::string_view name, const lock_request& request,
                                    const lock_options& options,
                                    std::chrono::steady_clock::time_point deadline,
                                    std::error_code& ec) noexcept {
    ec.clear();
    detail::validate_lock_name(name, max_name_length, ec);
    if (ec) return {};
    detail::validate_lock_options(options, ec);
    if (ec) return {};
    if (request.kind == lock_kind::permits &&
        (request.count == 0 || request.limit < request.count)) {
        detail::fail(ec, errc::invalid_argument,
                     "memory backend: permits count " + std::to_string(request.count) +
                         " must be in [1, limit " + std::to_string(request.limit) + "]");
        return {};
    }
    auto& s = *state_;
    std::unique_lock lock(s.mutex);
    auto& n = s.names[std::string(name)];
    const auto fam = family_of(request.kind);
    if (n.in_use() && n.fam != fam) {
        detail::fail(ec, errc::unexpected_reply,
                     "memory backend: \"" + std::string(name) + "\" is used by another lock kind");
        return {};
    }
    n.fam = fam;
    std::string owner;
    if (request.kind == lock_kind::reentrant && request.reenter != nullptr) {
        const auto* core = detail::lease_access::core(*request.reenter);
        const auto mine = std::find_if(n.grants.begin(), n.grants.end(), [&](const grant& g) {
            return core != nullptr && g.id == core;
        });
        if (mine == n.grants.end()) {
            detail::fail(
                ec, errc::lock_lost,
                "memory backend: the re-entered grant of \"" + std::string(name) + "\" is lost");
            return {};
        }
        owner = mine->owner;
    }
    if (request.kind == lock_kind::permits && n.permits == 0) n.permits = request.limit;
    const bool queued = request.kind == lock_kind::fair || request.kind == lock_kind::write;
    const auto ticket = ++s.next_ticket;
    if (queued) n.queue.push_back(ticket);
    const auto leave_queue = [&] {
        if (!queued) return;
        const auto q = std::find(n.queue.begin(), n.queue.end(), ticket);
        if (q != n.queue.end()) n.queue.erase(q);
        s.changed_locked();
    };
    const auto admitted = [&] {
        const auto now = steady::now();
        const auto live = [&](const grant& g) { return now < g.valid_until; };
        switch (request.kind) {
            case lock_kind::exclusive: return std::none_of(n.grants.begin(), n.grants.end(), live);
            case lock_kind::reentrant:
                return std::none_of(n.grants.begin(), n.grants.end(),
                                    [&](const grant& g) { return live(g) && g.owner != owner; });
            case lock_kind::fair:
            case lock_kind::write:
                return n.queue.front() == ticket &&
                       std::none_of(n.grants.begin(), n.grants.end(), live);
            case lock_kind::read:
                return n.queue.empty() &&
                       std::none_of(n.grants.begin(), n.grants.end(), [&](const grant& g) {
                           return live(g) && g.kind == lock_kind::write;
                       });
            case lock_kind::permits: {
                std::uint64_t used = 0;
                for (const auto& g : n.grants)
                    if (live(g)) used += g.count;
                return used + request.count <= n.permits;
            }
        }
        return false;
    };
    unsigned attempts = 0;
    while (true) {
        ++attempts;
        if (admitted()) break;
        if (options.cancel.stop_requested()) {
            leave_queue();
            detail::fail(ec, errc::canceled, "memory backend: canceled");
            return {};
        }
        if (options.max_attempts && attempts >= *options.max_attempts) {
            leave_queue();
            detail::fail(ec, errc::attempts_exhausted,
                         "memory backend: \"" + std::string(name) + "\" stayed held");
            return {};
        }
        if (steady::now() >= deadline) {
            leave_queue();
            detail::fail(ec, errc::timeout,
                         "memory backend: \"" + std::string(name) + "\" stayed held");
            return {};
        }
        // Wakes on any change, on cancel, and at the earliest expiry (a grant may lapse).
        auto wake = deadline;
        for (const auto& g : n.grants) wake = std::min(wake, g.valid_until);
        const auto seen = s.generation;
        s.changed.wait_until(lock, options.cancel, wake, [&] { return s.generation != seen; });
    }
    if (queued) n.queue.pop_front();
    if (owner.empty()) owner = "owner-" + std::to_string(++s.next_owner);
    std::uint64_t fence = 0;
    if (request.kind == lock_kind::reentrant && request.reenter != nullptr)
        fence = request.reenter->fencing_token();
    else
        fence = ++n.fence;
    const auto now = steady::now();
    const auto hold_end =
        options.max_hold == forever ? steady::time_point::max() : now + options.max_hold;
    const auto valid_until = std::min(now + options.lease, hold_end);
    auto core = std::make_shared<detail::lease_core>(state_, std::string(name), owner, fence,
                                                     options, now, valid_until, request.kind);
    n.grants.push_back({core, core.get(), owner, request.kind,
                        request.kind == lock_kind::permits ? request.count : 1u, options.renew,
                        options.lease, valid_until, hold_end});
    if (queued) s.changed_locked();  // the next in line may now be first
    return detail::lease_access::make(std::move(core));
}

void memory_backend::set_permits(std::string_view name, std::uint32_t permits,
                                 std::error_code& ec) noexcept {
    ec.clear();
    detail::validate_lock_name(name, max_name_length, ec);
    if (ec) return;
    if (permits == 0) {
        detail::fail(ec, errc::invalid_argument, "memory backend: permits must be >= 1");
        return;
    }
    {
        std::lock_guard lock(state_->mutex);
        auto& n = state_->names[std::string(name)];
        if (n.in_use() && n.fam != family::permits) {
            detail::fail(ec, errc::unexpected_reply,
                         "memory backend: \"" + std::string(name) + "\" is used by another kind");
            return;
        }
        n.fam = family::permits;
        n.permits = permits;
        state_->changed_locked();
    }
}

std::string memory_backend::record_once(std::string_view name, std::string_view value,
                                        std::error_code& ec) noexcept {
    ec.clear();
    detail::validate_lock_name(name, max_name_length, ec);
    if (ec) return {};
    if (value.empty() || value.size() > max_record_size) {
        detail::fail(
            ec, errc::invalid_argument,
            "memory backend: record values are 1 to " + std::to_string(max_record_size) + " bytes");
        return {};
    }
    std::lock_guard lock(state_->mutex);
    return state_->records.try_emplace(std::string(name), value).first->second;
}

std::size_t memory_backend::queued(std::string_view name) const {
    std::lock_guard lock(state_->mutex);
    const auto it = state_->names.find(name);
    return it == state_->names.end() ? 0 : it->second.queue.size();
}

std::size_t memory_backend::held(std::string_view name) const {
    std::lock_guard lock(state_->mutex);
    const auto it = state_->names.find(name);
    return it == state_->names.end() ? 0 : it->second.grants.size();
}

}  // namespace dlock::test
