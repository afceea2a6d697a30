#include "core/callbacks.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include <dlock/error.hpp>

namespace dlock::detail {

void report_to(const error_handler& handler, std::error_code ec, std::string_view what) noexcept {
    try {
        if (handler) {
            handler(ec, what);
            return;
        }
    } catch (...) {
        // The handler itself failed: fall through to stderr rather than lose the report.
    }
    std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(what.size()), what.data());
}

acquire_frame*& current_acquire() noexcept {
    thread_local acquire_frame* current = nullptr;
    return current;
}

void notify_observer(const observer& watcher, const error_handler& handler,
                     const lock_event& event) noexcept {
    auto* frame = current_acquire();
    if (frame && event.kind == event_kind::wait_started) frame->waited = true;
    if (!watcher) return;
    try {
        if (frame && event.kind == event_kind::acquired && event.since == decltype(event.since){}) {
            auto stamped = event;
            stamped.since = frame->started;
            stamped.waited = frame->waited;
            watcher(stamped);
            return;
        }
        watcher(event);
    } catch (const std::exception& e) {
        report_to(handler, make_error_code(errc::invalid_argument),
                  std::string("observer threw: ") + e.what());
    } catch (...) {
        report_to(handler, make_error_code(errc::invalid_argument),
                  "observer threw a non-standard exception");
    }
}

}  // namespace dlock::detail
