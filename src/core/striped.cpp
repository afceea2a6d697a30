// dlock::striped's count check (include/dlock/striped.hpp, docs/granularity.md): the stripe
// count recorded for a base name, checked at first use and after every grant of a stripe.
#include <dlock/striped.hpp>

#include <new>

#include "core/status.hpp"

namespace dlock::detail {

bool check_stripe_count(backend& service, const std::string& base, std::size_t count,
                        std::error_code& ec) noexcept {
    ec.clear();
    try {
        const auto mine = std::to_string(count);
        const auto recorded = service.record_once(base + "/#stripes", mine, ec);
        if (ec == errc::unsupported) {
            ec.clear();  // nothing to check against
            return true;
        }
        if (ec) {
            fail(ec, ec,
                 "striped \"" + base + "\": cannot record the stripe count: " + message_for(ec));
            return false;
        }
        if (recorded != mine) {
            fail(ec, errc::invalid_argument,
                 "striped \"" + base + "\": opened with " + mine +
                     " stripes, but the server records " + recorded +
                     " for this base name (set at first use); every process must use the same "
                     "count, or keys map to different stripes");
            return false;
        }
        return true;
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return false;
    }
}

lease stripe_count_backend::acquire_until(std::string_view name, const lock_request& request,
                                          const lock_options& options,
                                          std::chrono::steady_clock::time_point deadline,
                                          std::error_code& ec) noexcept {
    auto granted = inner_.acquire_until(name, request, options, deadline, ec);
    if (ec) return granted;
    // After the grant, not before: a check before a long wait would say nothing about the
    // record when the grant arrives.
    if (!check_stripe_count(inner_, base_, count_, ec)) {
        const auto why = message_for(ec);
        const auto code = ec;
        std::error_code ignored;
        granted.release(ignored);
        fail(ec, code, "lock \"" + std::string(name) + "\" released at once: " + why);
        return lease{};
    }
    return granted;
}

void stripe_count_backend::set_permits(std::string_view name, std::uint32_t permits,
                                       std::error_code& ec) noexcept {
    inner_.set_permits(name, permits, ec);
}

lock_info stripe_count_backend::inspect(std::string_view name, std::error_code& ec) noexcept {
    return inner_.inspect(name, ec);
}

std::unique_ptr<lock_watch> stripe_count_backend::watch(std::string_view name,
                                                        std::error_code& ec) noexcept {
    return inner_.watch(name, ec);
}

std::string stripe_count_backend::record_once(std::string_view name, std::string_view value,
                                              std::error_code& ec) noexcept {
    return inner_.record_once(name, value, ec);
}

}  // namespace dlock::detail
