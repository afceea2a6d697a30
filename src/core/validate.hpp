// Argument validation shared by every backend. Messages name the field and the bad value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/options.hpp>

namespace dlock::detail {

void validate_lock_name(std::string_view name, std::size_t max_length,
                        std::error_code& ec) noexcept;
void validate_lock_options(const lock_options& options, std::error_code& ec) noexcept;
/// backend::record_once's arguments: a valid lock name and a value of 1 to max_record_size
/// bytes. The message names `quoted` (the call, as the error should show it).
void validate_record(std::string_view name, std::string_view value, std::size_t max_name_length,
                     const std::string& quoted, std::error_code& ec) noexcept;
/// What a backend tells the error handler when a semaphore's number of permits on the server
/// (`recorded`) is not the one the acquire asked for (`asked`): both numbers, and that the
/// recorded one counts (docs/lock-family.md, "A different number of permits").
std::string permits_mismatch(std::string_view quoted, std::uint64_t recorded, std::uint64_t asked);

}  // namespace dlock::detail
