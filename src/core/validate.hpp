// Argument validation shared by every backend. Messages name the field and the bad value.
#pragma once

#include <cstddef>
#include <string_view>
#include <system_error>

#include <dlock/options.hpp>

namespace dlock::detail {

void validate_lock_name(std::string_view name, std::size_t max_length,
                        std::error_code& ec) noexcept;
void validate_lock_options(const lock_options& options, std::error_code& ec) noexcept;

}  // namespace dlock::detail
