// How one Redis acquire call waits between its attempts, as ZooKeeper's recipe has per-kind
// drivers (src/zk/recipe.hpp): the owner token and waiter id each attempt sends, the channel a
// wait listens on and whether a message wakes one waiter or all, when to attempt again without a
// message, and whether a message itself grants the lock. The engine's one acquire loop
// (engine.cpp) runs on it with core/acquire_policy.hpp and does the I/O; this does none, and takes
// the time as a parameter.
//
//   broadcast_waiter   releases publish on the lock's release channel and every waiter
//                      re-attempts (one waiter of this client is woken where a release lets one
//                      in): the reentrant, read and permits kinds.
//   mutex_waiter       the exclusive kind: from its first wait on, the waiter registers among
//                      the mutex waiters (on Redlock on every server), and a release hands the
//                      key to their live head (its waiter id becomes the owner token) and tells
//                      it: that grant is the hold, with no attempt after it; else the head's
//                      attempt (its id as its token) takes the key up (docs/redis-lock.md,
//                      "Waking one waiter"). On Redlock a quorum of those grants at one fencing
//                      token is the grant (docs/redlock.md, "Waiting").
//   queued_waiter      the fair and write kinds: one queue entry for the whole call, and a
//                      release hands the lock to the head directly (docs/lock-family.md,
//                      "Hand-off"), checked by the ticket rule (acquire_rules.hpp).
//
// Not thread-safe: one strategy per acquire call.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/backend.hpp>

#include "core/renewal.hpp"
#include "redis/acquire_rules.hpp"

namespace dlock::redis::detail {

/// Where a waiter listens for the message that ends its wait.
struct wait_target {
    std::string channel;
    bool wake_one = false;  ///< a message wakes one waiter of the channel (subscriber::wake_mode)
    std::string key;        ///< non-empty: a keyed waiter of a hand-off channel (subscriber.hpp)
};

/// What every strategy is made from.
struct waiter_context {
    lock_kind kind = lock_kind::exclusive;
    /// Names this client in tokens and waiter ids (engine::client_tag_).
    std::string client_tag;
    /// The lock's release channel (engine::channel).
    std::string release_channel;
    /// The per-server bound of an attempt (a split vote retries within twice this).
    std::chrono::milliseconds node_timeout{};
    dlock::detail::drift_model drift{};
    jitter_source jitter = nullptr;
    /// How many nodes vote (Redlock: more than one). Each hands its free key to its head's
    /// waiter id and tells it so (lib/queue.lua, dlock_hand_mutex_head): a registered
    /// mutex_waiter attempts with that id as its token, and a quorum of such grants is a grant.
    std::size_t nodes = 1;
};

/// What a contended attempt told the waiter.
struct contended_attempt {
    contention found;                   ///< for the re-check time
    std::size_t holding = 0;            ///< servers where someone else holds the lock (or we queue)
    std::uint64_t ticket = 0;           ///< queued kinds: our entry's ticket; 0: none reported
    steady::time_point sent;            ///< when the attempt was sent
    std::chrono::milliseconds lease{};  ///< the lease it asked for
    /// Each node's ticket when it answered "held" with one, else 0 (in node order).
    std::vector<std::uint64_t> node_tickets;
    /// The attempt was undone everywhere, its registration with it (a split, a failure).
    bool undone = false;
};

class waiter_strategy {
public:
    explicit waiter_strategy(waiter_context context) : context_(std::move(context)) {}
    virtual ~waiter_strategy() = default;
    waiter_strategy(const waiter_strategy&) = delete;
    waiter_strategy& operator=(const waiter_strategy&) = delete;

    /// The owner token the next attempt sends (a fresh one each time, or the queue entry's).
    virtual const std::string& next_token() = 0;
    /// The id this waiter is registered under among the mutex waiters, sent with each attempt;
    /// empty: none (yet).
    virtual const std::string& waiter_id() const noexcept { return none_; }
    /// The ticket floor sent with each attempt (handoff_ticket::floor); 0: not queued.
    virtual std::uint64_t ticket_floor() const noexcept { return 0; }
    /// Once an attempt was sent, whether every exit but a grant must leave the queue (engine::
    /// leave_queue, which also releases a grant whose reply was lost), and under which token;
    /// nullptr: nothing to leave.
    virtual const std::string* leaves_as() const noexcept { return nullptr; }
    /// A channel to register on before the first attempt if it is subscribed already (a hot
    /// lock: our last wait on it lingers), so that a grant published after the attempt is caught
    /// without a second one; nullopt: none.
    virtual std::optional<wait_target> lingering() const { return std::nullopt; }
    /// The engine registers on lingering()'s channel before the first attempt: the target to
    /// register with (the waiter's key may be made only now, and the first attempt then carries
    /// it).
    virtual wait_target listen_early() { return *lingering(); }
    /// Where to wait from the first contention on.
    virtual wait_target subscribe() = 0;
    /// After a contended attempt, found at `now`: when to attempt again without a message.
    virtual steady::time_point contended(const contended_attempt& attempt,
                                         steady::time_point now) = 0;
    /// Whether a message can grant the lock (a hand-off): only then does the engine read the
    /// channel's latest message after a wait and ask woke().
    virtual bool granted_by_message() const noexcept { return false; }
    /// After a wait: whether `messages`, the channel's latest (for our key) from each node (one
    /// on one server), grant us the lock, valid at `now`; nullopt: attempt again.
    virtual std::optional<handoff_grant> woke(const std::vector<std::string>& /*messages*/,
                                              steady::time_point /*now*/) const {
        return std::nullopt;
    }
    /// After woke() said no: how long to wait for more nodes' grants before attempting (some
    /// granted, not yet a quorum: the others' are on their way); zero: attempt now.
    virtual std::chrono::nanoseconds awaits_more(const std::vector<std::string>& /*messages*/,
                                                 steady::time_point /*now*/) const {
        return {};
    }

protected:
    /// A fresh owner token (src/redis/lua/lib/kind_guard.lua): the fair and write kinds, whose
    /// key the server cannot tell from the exclusive kind's, carry "<kind>:<client>." before the
    /// random part; that prefix also names the client's hand-off channel.
    std::string new_token() const;
    /// retry_at (acquire_rules.hpp) with this context's node timeout and jitter.
    steady::time_point retry_after(const contended_attempt& attempt, bool keeps_entry_alive,
                                   steady::time_point now) const;

    const waiter_context context_;

private:
    static const std::string none_;
};

/// Releases publish on the release channel; a fresh token for every attempt.
class broadcast_waiter final : public waiter_strategy {
public:
    using waiter_strategy::waiter_strategy;
    const std::string& next_token() override;
    wait_target subscribe() override;
    steady::time_point contended(const contended_attempt& attempt, steady::time_point now) override;

private:
    std::string token_;
};

/// The exclusive kind: registered among the mutex waiters (on every server) once it waits, and
/// handed the key by a release.
class mutex_waiter final : public waiter_strategy {
public:
    explicit mutex_waiter(waiter_context context);
    const std::string& next_token() override;
    const std::string& waiter_id() const noexcept override { return waiter_; }
    std::uint64_t ticket_floor() const noexcept override { return handoff_.floor(); }
    const std::string* leaves_as() const noexcept override;
    /// The hand-off channel, if it lingers, so that a waiter on a hot lock registers with its
    /// first attempt (one round fewer).
    std::optional<wait_target> lingering() const override;
    wait_target listen_early() override;
    wait_target subscribe() override;
    steady::time_point contended(const contended_attempt& attempt, steady::time_point now) override;
    /// The nodes' hand-off grants (quorum_handoff; one node: its grant).
    bool granted_by_message() const noexcept override { return true; }
    std::optional<handoff_grant> woke(const std::vector<std::string>& messages,
                                      steady::time_point now) const override;
    std::chrono::nanoseconds awaits_more(const std::vector<std::string>& messages,
                                         steady::time_point now) const override;

private:
    wait_target target() const;

    std::string token_;
    std::string waiter_;             // "mutex:<client>.<random>", from the first wait on
    quorum_handoff handoff_;         // one ticket per node
    steady::duration last_round_{};  // Redlock: our last attempt's round trip
};

/// The fair and write kinds: one queue entry (one token) for the whole call, granted by hand-off.
class queued_waiter final : public waiter_strategy {
public:
    explicit queued_waiter(waiter_context context);
    const std::string& next_token() override;
    std::uint64_t ticket_floor() const noexcept override { return ticket_.floor(); }
    const std::string* leaves_as() const noexcept override { return &token_; }
    std::optional<wait_target> lingering() const override { return subscribe_target(); }
    wait_target subscribe() override { return subscribe_target(); }
    steady::time_point contended(const contended_attempt& attempt, steady::time_point now) override;
    bool granted_by_message() const noexcept override { return true; }
    std::optional<handoff_grant> woke(const std::vector<std::string>& messages,
                                      steady::time_point now) const override;

private:
    wait_target subscribe_target() const;

    std::string token_;  // our place in the queue
    handoff_ticket ticket_;
};

/// The strategy of an acquire of `context.kind` whose protocol is `queued` (lock_protocol), on
/// one server or several (Redlock).
std::unique_ptr<waiter_strategy> make_waiter(waiter_context context, bool queued);

}  // namespace dlock::redis::detail
