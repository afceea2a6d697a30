// `dlock::backend`: what a lock service (Redis, Redlock, ZooKeeper, etcd) offers to the
// backend-neutral lock types. Users get one from a backend's client (dlock::redis::client, ...)
// and pass it to dlock::mutex; they rarely call it directly except through acquire().
//
// Sharing: every backend is thread-safe; one client per process serves all threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/lease.hpp>
#include <dlock/options.hpp>

namespace dlock {

/// Which member of the lock family a grant belongs to. One name is used by one kind only: the
/// kinds keep different server-side state, and a backend answers errc::unexpected_reply (Redis
/// WRONGTYPE) when a name's state belongs to another kind.
enum class lock_kind : std::uint8_t {
    exclusive,  ///< dlock::mutex: one holder
    reentrant,  ///< dlock::recursive_mutex: one owner, who may take it again
    fair,       ///< dlock::fair_mutex: one holder, waiters served first come first served
    read,       ///< dlock::shared_mutex, shared side: many readers while no writer
    write,      ///< dlock::shared_mutex, exclusive side: one writer, no readers
    permits,    ///< dlock::counting_semaphore: up to a set number of permits held at once
};

const char* to_string(lock_kind kind) noexcept;

/// What to acquire: the kind and its parameters. The default is a plain exclusive lock.
struct lock_request {
    lock_kind kind = lock_kind::exclusive;
    /// permits: how many permits to take at once (>= 1). Ignored by the other kinds.
    std::uint32_t count = 1;
    /// permits: the semaphore's number of permits, set on the server by the first acquire when
    /// none is set yet (later changes go through set_permits()). Must be >= count.
    std::uint32_t limit = 1;
    /// reentrant: a live lease of the same owner on the same lock. The grant re-enters it (same
    /// owner, same fencing token, one more level) without competing; releasing the returned lease
    /// leaves one level. Null: a new owner competes for the lock.
    const lease* reenter = nullptr;
};

class backend {
public:
    virtual ~backend() = default;

    /// Takes the lock `name` of kind `request.kind`, waiting while others hold it until `deadline`
    /// (a past deadline means exactly one attempt). Returns the grant; on failure returns an empty
    /// lease and sets `ec`: errc::timeout / attempts_exhausted when the lock stayed held by someone
    /// else, errc::unsupported when this backend lacks the kind, another errc when the backend
    /// failed. Waiting is notification-driven (no polling). `options.wait` is ignored here: the
    /// deadline is the bound.
    [[nodiscard]] virtual lease acquire_until(std::string_view name, const lock_request& request,
                                              const lock_options& options,
                                              std::chrono::steady_clock::time_point deadline,
                                              std::error_code& ec) noexcept = 0;

    /// The exclusive lock: acquire_until(name, lock_request{}, options, deadline, ec).
    [[nodiscard]] lease acquire_until(std::string_view name, const lock_options& options,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::error_code& ec) noexcept {
        return acquire_until(name, lock_request{}, options, deadline, ec);
    }

    /// Administrative: sets the number of permits of semaphore `name` (>= 1), whether or not it
    /// was set before. Permits already held stay held; if more are held than the new number,
    /// acquirers wait until enough are released. errc::unsupported when the backend has no
    /// semaphore. Throws dlock::error; the twin sets `ec`.
    void set_permits(std::string_view name, std::uint32_t permits);
    virtual void set_permits(std::string_view name, std::uint32_t permits,
                             std::error_code& ec) noexcept;

    /// Small settings every process must agree on (dlock::striped's stripe count): stores `value`
    /// under `name` if nothing is stored there yet, and returns what is stored (`value`, or what
    /// an earlier call stored). Never expires; one round trip. Names live beside the lock names
    /// (Redis: the key "<prefix>:{<name>}:record"). errc::unsupported when the backend has no such
    /// store (the default; Redlock and ZooKeeper today).
    virtual std::string record_once(std::string_view name, std::string_view value,
                                    std::error_code& ec) noexcept;

    /// Takes the lock `name`, blocking up to `options.wait`. Throws dlock::error: errc::timeout
    /// when the wait bound passed while the lock was held by someone else, another errc when the
    /// backend failed. Nothing is held after a throw.
    [[nodiscard]] lease acquire(std::string_view name, const lock_options& options = {});
    /// The non-throwing twin of acquire(); returns an empty lease and sets `ec` on failure.
    [[nodiscard]] lease acquire(std::string_view name, const lock_options& options,
                                std::error_code& ec) noexcept;
    /// acquire() for any lock kind (a fair lock, a read lock, k permits, ...).
    [[nodiscard]] lease acquire(std::string_view name, const lock_request& request,
                                const lock_options& options);
    [[nodiscard]] lease acquire(std::string_view name, const lock_request& request,
                                const lock_options& options, std::error_code& ec) noexcept;
};

}  // namespace dlock
