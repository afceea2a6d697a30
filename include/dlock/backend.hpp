// `dlock::backend`: what a lock service (Redis, Redlock, ZooKeeper, etcd) offers to the
// backend-neutral lock types. Users get one from a backend's client (dlock::redis::client, ...)
// and pass it to dlock::mutex; they rarely call it directly except through acquire().
//
// Sharing: every backend is thread-safe; one client per process serves all threads.
#pragma once

#include <chrono>
#include <string_view>
#include <system_error>

#include <dlock/lease.hpp>
#include <dlock/options.hpp>

namespace dlock {

class backend {
public:
    virtual ~backend() = default;

    /// Takes the lock `name`, waiting while someone else holds it until `deadline` (a past
    /// deadline means exactly one attempt). Returns the grant; on failure returns an empty lease
    /// and sets `ec`: errc::timeout / attempts_exhausted when the lock stayed held by someone else,
    /// another errc when the backend failed. Waiting is notification-driven (no polling).
    /// `options.wait` is ignored here: the deadline is the bound.
    [[nodiscard]] virtual lease acquire_until(std::string_view name, const lock_options& options,
                                              std::chrono::steady_clock::time_point deadline,
                                              std::error_code& ec) noexcept = 0;

    /// Takes the lock `name`, blocking up to `options.wait`. Throws dlock::error: errc::timeout
    /// when the wait bound passed while the lock was held by someone else, another errc when the
    /// backend failed. Nothing is held after a throw.
    [[nodiscard]] lease acquire(std::string_view name, const lock_options& options = {});
    /// The non-throwing twin of acquire(); returns an empty lease and sets `ec` on failure.
    [[nodiscard]] lease acquire(std::string_view name, const lock_options& options,
                                std::error_code& ec) noexcept;
};

}  // namespace dlock
