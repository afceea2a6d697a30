// `dlock::lease`: one grant of a distributed lock, as returned by a backend's acquire(). It owns
// the lock until it is released (explicitly, or by its destructor) or lost. While it lives the
// backend's watchdog renews it (lock_options::renew) and watches for its loss.
//
// Sharing: a lease is used by one thread at a time, like a std::unique_lock. Its observers
// (fencing_token, expires_in, state, lost_token) may be called from any thread.
//
// Fork: in a child process forked while the lease lived, the child's copy is inert: state() is
// lost, lost_token() has fired, release() sets errc::not_owner and the destructor does nothing.
// Only the parent (the process that acquired it) releases the lock (docs/lock-family.md, "fork").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <system_error>

namespace dlock {

namespace detail {
class lease_core;
struct lease_access;
}  // namespace detail

/// How far a holder can trust its grant (Curator's CONNECTED / SUSPENDED / LOST).
enum class lock_state {
    held,       ///< renewed or granted recently; valid for at least expires_in()
    uncertain,  ///< the last renewal failed (server unreachable); still valid for expires_in()
    lost,       ///< no longer guaranteed: expired, taken over, deleted, or released
};

const char* to_string(lock_state state) noexcept;

/// Why a grant ended. Reported by lease::lost_reason() and by the lost / released events.
enum class lost_reason : std::uint8_t {
    none,             ///< not lost: the grant is still valid (held or uncertain)
    released,         ///< the holder released it (or the lease is empty)
    expired,          ///< the lease ran out: renewals failed until its end, or a fixed lease ended
    max_hold,         ///< lock_options::max_hold ran out (renewal stopped at the cap)
    taken_over,       ///< the server holds another owner's token (it expired there and was retaken)
    deleted,          ///< the lock's state vanished on the server: deleted by someone else (or
                      ///< lost by the server, e.g. a failover without persistence)
    session_expired,  ///< ZooKeeper: the session that owned the node expired
    client_closed,    ///< the client was destroyed while the grant lived; nobody renews it
};

const char* to_string(lost_reason reason) noexcept;

class lease {
public:
    /// An empty lease: owns nothing (the state of a moved-from lease). state() is lost.
    lease() noexcept;
    lease(lease&&) noexcept;
    lease& operator=(lease&&) noexcept;  ///< releases what *this held first
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    /// Releases the lock if still owned. Never throws: a failure goes to the client's error handler
    /// and the lease then expires on the server.
    ~lease();

    /// True if this lease owns a grant (it may still be lost: see state()).
    explicit operator bool() const noexcept;

    /// The lock's name as given to acquire(). Empty for an empty lease.
    const std::string& name() const noexcept;

    /// The grant's fencing token: strictly larger than every earlier grant's token for this lock
    /// name on this backend. Pass it to the protected resource so it can reject stale holders.
    /// Throws errc::not_owner on an empty lease.
    std::uint64_t fencing_token() const;

    /// Conservative time left on the lease: counted from the steady time *before* the request that
    /// set it was sent, minus clock drift. 0 when lost or empty.
    std::chrono::milliseconds expires_in() const noexcept;

    lock_state state() const noexcept;

    /// Fires (stop_requested() becomes true) when the grant can no longer be guaranteed, and when
    /// it is released. Composes with std::jthread and std::condition_variable_any. An empty lease
    /// gives a token that has already fired.
    std::stop_token lost_token() const noexcept;

    /// Why the grant ended, once state() is lost: lost_reason::none while it is held or uncertain;
    /// `released` for an empty lease. A loss the watchdog has not examined yet (the lease ran out
    /// before its next check) is `expired` or `max_hold`. Thread-safe like state().
    dlock::lost_reason lost_reason() const noexcept;

    /// Releases the lock in one round trip (atomic compare-and-delete on the server). Afterwards
    /// the lease is empty. Throws errc::lock_lost if the server no longer held our token (nothing
    /// of another owner's was touched), or a backend error (the lease then expires on the server).
    /// Releasing an empty lease, or a parent's lease in a forked child (nothing is sent), throws
    /// errc::not_owner.
    void release();
    void release(std::error_code& ec) noexcept;

private:
    friend struct detail::lease_access;
    explicit lease(std::shared_ptr<detail::lease_core> core) noexcept;
    std::shared_ptr<detail::lease_core> core_;
};

}  // namespace dlock
