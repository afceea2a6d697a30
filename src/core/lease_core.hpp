// The shared state of one grant: what dlock::lease points to and what a backend's watchdog
// renews. Backend-neutral and free of I/O; the backend plugs in through `lease_owner`.
//
// State machine (docs/redis-lock.md):
//   held --renew failed--> uncertain --renewed--> held
//   held/uncertain --expired | key gone | other token | released--> lost   (final; fires
//   lost_token)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <system_error>

#include <dlock/backend.hpp>
#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>

#include "core/callbacks.hpp"
#include "core/fork.hpp"
#include "core/renewal.hpp"

namespace dlock::detail {

class lease_core;

/// What a backend implements for the leases it grants. forked() (from fork_witness) is true in a
/// child process forked after the backend was created: there it must neither join its threads nor
/// act on the server for the parent.
class lease_owner : public fork_witness {
public:
    virtual ~lease_owner() = default;
    /// Stops renewing and deletes the lock on the server only if it still holds `lease`'s token.
    /// errc::lock_lost if it did not (nothing else is touched); a backend errc if it could not
    /// tell.
    virtual void release(lease_core& lease, std::error_code& ec) noexcept = 0;
    /// Reports a failure nobody can be thrown to (destructor release, callbacks).
    virtual void report_error(std::error_code ec, std::string_view what) noexcept = 0;
    /// Sends an event to the observer, if any.
    virtual void notify(const lock_event& event) noexcept = 0;
};

class lease_core {
public:
    lease_core(std::shared_ptr<lease_owner> owner, std::string name, std::string token,
               std::uint64_t fencing_token, const lock_options& options, steady::time_point granted,
               steady::time_point valid_until, lock_kind kind = lock_kind::exclusive,
               bool after_wait = false);

    const std::string& name() const noexcept { return name_; }
    const std::string& token() const noexcept { return token_; }
    std::uint64_t fencing_token() const noexcept { return fencing_token_; }
    lock_kind kind() const noexcept { return kind_; }
    const renewal_plan& plan() const noexcept { return plan_; }
    steady::time_point granted_at() const noexcept { return granted_; }
    /// The grant came after its caller waited for another holder (a hand-off, or an attempt after
    /// a release): others likely wait behind it too.
    bool after_wait() const noexcept { return after_wait_; }
    lease_owner& owner() const noexcept { return *owner_; }

    steady::time_point valid_until() const noexcept;
    /// The state at `now`: lost once valid_until() has passed, even before the watchdog noticed,
    /// and always in a forked child (the grant is the parent's).
    lock_state state(steady::time_point now) const noexcept;
    /// True in a child process forked after the grant: the lock is the parent's, and the child's
    /// copy must never release it (dlock::lease makes such a copy inert).
    bool forked() const noexcept { return born_in_.forked(); }
    std::stop_token lost_token() const noexcept { return lost_.get_token(); }

    /// A renewal was confirmed by the server: validity becomes exactly `new_valid_until` (the
    /// renewal's send time + its lease - drift), lower than before if that lease was shorter.
    /// Callers must not apply an older renewal's answer after a newer one's.
    void renewed(steady::time_point new_valid_until) noexcept;
    /// A renewal could not be confirmed (server unreachable); valid_until() is unchanged. true on
    /// the first failure of an episode (held -> uncertain): the caller then calls
    /// report_renewal_failed() once it holds no lock of its own (the observer may call back in).
    bool renewal_failed() noexcept;
    /// Emits the renewal_failed event.
    void report_renewal_failed() noexcept;
    /// Moves to lost (once), fires lost_token and runs on_lost with `why`. true on the transition.
    /// `reason` none: the lease ran out, expiry_reason() tells expired from max_hold. The lost
    /// event is emitted unless the grant already ended (finish_release).
    bool lose(std::error_code why, lost_reason reason = lost_reason::none) noexcept;
    /// Marks a deliberate release: lost_token fires, on_lost does not run. true the first time.
    bool mark_released() noexcept;
    bool released() const noexcept { return released_.load(); }
    /// A release found the grant no longer ours for `reason` (taken over, deleted, session
    /// expired): finish_release reports it as lost with that reason.
    void note_loss(lost_reason reason) noexcept;
    /// After the owner's release(): emits the grant's end (released, or lost when `ec` is
    /// lock_lost) unless lose() already did. Every grant ends with exactly one of them.
    void finish_release(std::error_code ec) noexcept;
    /// Why the grant ended; none while valid at `now`.
    lost_reason reason(steady::time_point now) const noexcept;
    /// expired or max_hold, for a lease that ran out: max_hold when its validity reached the cap.
    lost_reason expiry_reason() const noexcept;

private:
    std::shared_ptr<lease_owner> owner_;
    const std::string name_;
    const std::string token_;
    const std::uint64_t fencing_token_;
    const lock_kind kind_;
    const renewal_plan plan_;
    const steady::time_point granted_;
    const bool after_wait_;
    const fork_witness born_in_;
    std::function<void(std::error_code)> on_lost_;
    std::atomic<steady::rep> valid_until_;
    std::atomic<lock_state> state_{lock_state::held};
    std::atomic<bool> released_{false};
    std::atomic<bool> ended_{false};  // the released or lost event was emitted
    std::atomic<lost_reason> reason_{lost_reason::none};
    std::stop_source lost_;
};

/// One acquire call, declared by a backend at the top of acquire_until (before its try): while it
/// lives, this thread's acquired event carries the call's start (since) and whether it waited;
/// when it ends with `ec` set, it emits gave_up. Not copyable; strictly nested per thread.
class acquire_call {
public:
    acquire_call(lease_owner& owner, std::string_view name, const std::error_code& ec) noexcept;
    ~acquire_call();
    acquire_call(const acquire_call&) = delete;
    acquire_call& operator=(const acquire_call&) = delete;

private:
    lease_owner& owner_;
    std::string_view name_;
    const std::error_code& ec_;
    acquire_frame frame_;
};

/// Tells `owner`'s error handler that a thread called unlock() on `kind` object `name` that another
/// thread owns (errc::not_owner): nothing was released. Never throws.
void report_foreign_unlock(lease_owner& owner, std::string_view kind,
                           std::string_view name) noexcept;

struct lease_access {
    static lease make(std::shared_ptr<lease_core> core) noexcept { return lease(std::move(core)); }
    static lease_core* core(const lease& l) noexcept { return l.core_.get(); }
    static std::shared_ptr<lease_core> shared_core(const lease& l) noexcept { return l.core_; }
};

}  // namespace dlock::detail
