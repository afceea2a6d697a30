// Lock events for observability: what happened to which lock, when. An `observer` is set on a
// client (client_options::observer) and is called from whichever thread caused the event (the
// caller's thread for acquire/release, the client's background thread for renewal and loss), with
// no dlock lock held. It must be thread-safe and quick; exceptions escaping it are caught and
// reported to the client's error handler. Silent by default (no observer).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>
#include <system_error>

namespace dlock {

enum class event_kind {
    wait_started,  ///< the first attempt found the lock held; the caller now waits
    acquired,      ///< a grant; fencing_token is set
    renewed,       ///< the watchdog extended the lease
    released,      ///< the holder released it
    lost,          ///< the grant can no longer be guaranteed; error says why
    error,         ///< a backend failure while acquiring, renewing or releasing
};

struct lock_event {
    event_kind kind;
    std::string_view name;            ///< the lock's name as the user gave it
    std::uint64_t fencing_token = 0;  ///< 0 when there is no grant (wait_started, error)
    std::error_code error;            ///< set for lost and error
    std::chrono::steady_clock::time_point at;
};

using observer = std::function<void(const lock_event&)>;

const char* to_string(event_kind kind) noexcept;

}  // namespace dlock
