// In-memory stand-ins for a lock service, for unit tests of the backend-neutral types: a
// lease_owner that records what the lease machinery asks of it, and a backend that grants a name
// to one holder at a time. No I/O; single-threaded use only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/event.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>

#include "core/lease_core.hpp"
#include "core/status.hpp"

namespace dlock_test {

class fake_owner final : public dlock::detail::lease_owner {
public:
    void release(dlock::detail::lease_core& lease, std::error_code& ec) noexcept override {
        ++releases;
        released_names.push_back(lease.name());
        ec.clear();
        if (release_result) {
            dlock::detail::fail(ec, release_result, "fake release failure");
            return;
        }
        held.erase(lease.name());
        lease.mark_released();
    }
    void report_error(std::error_code ec, std::string_view what) noexcept override {
        reported.push_back({ec, std::string(what)});
    }
    void notify(const dlock::lock_event& event) noexcept override {
        events.push_back({event.kind, std::string(event.name), event.fencing_token, event.error});
    }

    struct report {
        std::error_code code;
        std::string what;
    };
    struct event {
        dlock::event_kind kind;
        std::string name;
        std::uint64_t fencing_token;
        std::error_code error;
    };
    int releases = 0;
    std::vector<std::string> released_names;
    std::error_code release_result;  // when set, release() fails with it
    std::vector<report> reported;
    std::vector<event> events;
    std::set<std::string> held;  // names granted and not yet released
};

/// Grants each name to one holder at a time; a held name is contention (errc::timeout) at once,
/// whatever the deadline. `fail_with` makes the next acquire fail with that code instead.
class fake_backend final : public dlock::backend {
public:
    using dlock::backend::acquire_until;
    [[nodiscard]] dlock::lease acquire_until(std::string_view name,
                                             const dlock::lock_request& request,
                                             const dlock::lock_options& options,
                                             std::chrono::steady_clock::time_point deadline,
                                             std::error_code& ec) noexcept override {
        ec.clear();
        ++attempts;
        requests.push_back(request);
        deadlines.push_back(deadline);
        if (fail_with) {
            const auto code = std::exchange(fail_with, {});
            dlock::detail::fail(ec, code, "fake backend failure for \"" + std::string(name) + "\"");
            return {};
        }
        if (!owner->held.insert(std::string(name)).second) {
            dlock::detail::fail(ec, dlock::errc::timeout, "held by someone else");
            return {};
        }
        const auto now = std::chrono::steady_clock::now();
        return dlock::detail::lease_access::make(std::make_shared<dlock::detail::lease_core>(
            owner, std::string(name), "0123456789abcdef0123456789abcdef", ++fencing, options, now,
            now + std::chrono::hours(1)));
    }

    /// A held name is a held dlock::mutex; the counter is the last token of any name.
    using dlock::backend::inspect;
    [[nodiscard]] dlock::lock_info inspect(std::string_view name,
                                           std::error_code& ec) noexcept override {
        ec.clear();
        dlock::lock_info info;
        info.name = std::string(name);
        if (owner->held.count(std::string(name)) != 0) {
            info.type = dlock::lock_type::mutex;
            info.held = true;
            info.holders = 1;
        }
        if (fencing > 0) info.fencing_counter = fencing;
        return info;
    }

    std::shared_ptr<fake_owner> owner = std::make_shared<fake_owner>();
    std::vector<std::chrono::steady_clock::time_point> deadlines;
    std::vector<dlock::lock_request> requests;
    std::error_code fail_with;
    std::uint64_t fencing = 0;
    int attempts = 0;
};

}  // namespace dlock_test
