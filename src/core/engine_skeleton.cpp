#include "core/engine_skeleton.hpp"

#include <string>

#include "core/validate.hpp"

namespace dlock::detail {

bool check_acquire(std::string_view name, std::size_t max_name_length, const lock_request& request,
                   const lock_options& options, std::error_code& ec) noexcept {
    validate_lock_name(name, max_name_length, ec);
    if (!ec) validate_lock_options(options, ec);
    if (ec) return false;
    try {
        if (request.reenter && request.kind != lock_kind::reentrant) {
            fail(ec, errc::invalid_argument, "lock_request.reenter is only for the reentrant kind");
            return false;
        }
        if (request.kind == lock_kind::permits &&
            (request.count < 1 || request.limit < request.count)) {
            fail(ec, errc::invalid_argument,
                 "semaphore \"" + std::string(name) + "\": lock_request.count (" +
                     std::to_string(request.count) + ") must be >= 1 and <= limit (" +
                     std::to_string(request.limit) + ")");
            return false;
        }
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return false;
    }
    return true;
}

}  // namespace dlock::detail
