#include "core/validate.hpp"

#include <dlock/backend.hpp>

#include <string>

#include "core/renewal.hpp"
#include "core/status.hpp"

namespace dlock::detail {
namespace {
std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }
}  // namespace

void validate_lock_name(std::string_view name, std::size_t max_length,
                        std::error_code& ec) noexcept {
    ec.clear();
    if (name.empty()) return fail(ec, errc::invalid_argument, "lock name is empty");
    if (name.size() > max_length) {
        return fail(ec, errc::invalid_argument,
                    "lock name is " + std::to_string(name.size()) + " bytes; the limit is " +
                        std::to_string(max_length));
    }
}

void validate_record(std::string_view name, std::string_view value, std::size_t max_name_length,
                     const std::string& quoted, std::error_code& ec) noexcept {
    validate_lock_name(name, max_name_length, ec);
    if (ec || (!value.empty() && value.size() <= max_record_size)) return;
    try {
        fail(ec, errc::invalid_argument,
             quoted + ": the value must be 1 to " + std::to_string(max_record_size) +
                 " bytes, got " + std::to_string(value.size()));
    } catch (const std::bad_alloc&) {
        ec = std::make_error_code(std::errc::not_enough_memory);
    }
}

void validate_lock_options(const lock_options& o, std::error_code& ec) noexcept {
    ec.clear();
    if (o.lease <= std::chrono::milliseconds::zero()) {
        return fail(ec, errc::invalid_argument,
                    "lock_options.lease must be > 0, got " + ms(o.lease));
    }
    if (o.lease < min_lease) {
        return fail(
            ec, errc::invalid_argument,
            "lock_options.lease " + ms(o.lease) + " is under the minimum of " + ms(min_lease));
    }
    if (o.lease > max_lease) {
        return fail(ec, errc::invalid_argument,
                    "lock_options.lease " + ms(o.lease) + " is over the limit of " + ms(max_lease) +
                        " (use renewal for long holds)");
    }
    // A period at or past the validity margin would let the lease lapse before its first renewal.
    const auto renew_limit = o.lease - drift_for(o.lease);
    if (o.renew_every &&
        (*o.renew_every <= std::chrono::milliseconds::zero() || *o.renew_every >= renew_limit)) {
        return fail(ec, errc::invalid_argument,
                    "lock_options.renew_every must be in (0, " + ms(renew_limit) +
                        ") for lease=" + ms(o.lease) + ", got " + ms(*o.renew_every));
    }
    if (o.max_hold <= std::chrono::milliseconds::zero()) {
        return fail(ec, errc::invalid_argument,
                    "lock_options.max_hold must be > 0, got " + ms(o.max_hold));
    }
    if (o.max_attempts && *o.max_attempts == 0) {
        return fail(ec, errc::invalid_argument, "lock_options.max_attempts must be >= 1, got 0");
    }
}

std::string permits_mismatch(std::string_view quoted, std::uint64_t recorded, std::uint64_t asked) {
    return std::string(quoted) + ": the semaphore has " + std::to_string(recorded) +
           " permits on the server, not the " + std::to_string(asked) +
           " asked for; it counts as a semaphore of " + std::to_string(recorded) +
           " (set_permits changes it)";
}

}  // namespace dlock::detail
