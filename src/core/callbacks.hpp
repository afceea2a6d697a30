// Delivery to the user's callbacks (client_options::error_handler and observer), shared by every
// backend: never throws, and an exception escaping a callback is reported, not swallowed.
// Runs the callback on the calling thread, with no dlock lock held by this code.
#pragma once

#include <chrono>
#include <functional>
#include <string_view>
#include <system_error>

#include <dlock/event.hpp>

namespace dlock::detail {

using error_handler = std::function<void(std::error_code, std::string_view)>;

/// Calls `handler`, or prints "dlock: <what>" on stderr when it is unset or throws.
void report_to(const error_handler& handler, std::error_code ec, std::string_view what) noexcept;

/// The acquire call running on this thread (acquire_call in lease_core.hpp pushes and pops it):
/// notify_observer stamps its acquired event with the call's start and whether it waited.
struct acquire_frame {
    std::chrono::steady_clock::time_point started;
    bool waited = false;
    acquire_frame* outer = nullptr;
};
acquire_frame*& current_acquire() noexcept;

/// Calls `watcher` with `event` if set; an exception from it goes to report_to(handler).
/// wait_started marks the current acquire_frame as waiting; acquired gets since / waited from it.
void notify_observer(const observer& watcher, const error_handler& handler,
                     const lock_event& event) noexcept;

}  // namespace dlock::detail
