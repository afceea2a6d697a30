// Delivery to the user's callbacks (client_options::error_handler and observer), shared by every
// backend: never throws, and an exception escaping a callback is reported, not swallowed.
// Runs the callback on the calling thread, with no dlock lock held by this code.
#pragma once

#include <functional>
#include <string_view>
#include <system_error>

#include <dlock/event.hpp>

namespace dlock::detail {

using error_handler = std::function<void(std::error_code, std::string_view)>;

/// Calls `handler`, or prints "dlock: <what>" on stderr when it is unset or throws.
void report_to(const error_handler& handler, std::error_code ec, std::string_view what) noexcept;

/// Calls `watcher` with `event` if set; an exception from it goes to report_to(handler).
void notify_observer(const observer& watcher, const error_handler& handler,
                     const lock_event& event) noexcept;

}  // namespace dlock::detail
