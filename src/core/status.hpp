// Error plumbing shared by every backend: an error_code plus a message that names the bad value.
// The public noexcept twins only carry the code; the message travels beside it in a thread-local
// slot so the throwing twins (and the CLI) can still say exactly what was wrong.
#pragma once

#include <string>
#include <system_error>

#include <dlock/error.hpp>

namespace dlock::detail {

/// Sets `ec` and remembers `message` for this thread.
void fail(std::error_code& ec, errc code, std::string message) noexcept;
void fail(std::error_code& ec, std::error_code code, std::string message) noexcept;

/// The message stored with `ec` on this thread by fail(), or the code's own message.
std::string message_for(const std::error_code& ec);

/// Throws dlock::error(ec, message_for(ec)) if ec is set.
void throw_if(const std::error_code& ec);

}  // namespace dlock::detail
