// The lock engine behind dlock::redis::client (one server) and dlock::redlock::client (N
// independent servers, majority quorum): acquire, release and renewal scripts run on every server
// at once (run_everywhere), one background thread renews every lease and serves the shared
// subscriber, and leases are dlock::detail::lease_core objects it owns through lease_owner.
// With one server the quorum is 1 and the fencing write-back never runs, so the single-instance
// lock is exactly docs/redis-lock.md; docs/redlock.md covers what N > 1 adds.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/event.hpp>
#include <dlock/lease.hpp>
#include <dlock/options.hpp>
#include <dlock/detail/thread_safety.hpp>
#include <dlock/redis/reply.hpp>

#include "core/engine_skeleton.hpp"
#include "core/event_fd.hpp"
#include "core/lease_core.hpp"
#include "core/lease_registry.hpp"
#include "core/renewal.hpp"
#include "core/url.hpp"
#include "redis/connection.hpp"
#include "redis/node.hpp"
#include "redis/protocol.hpp"
#include "redis/scripts.hpp"
#include "redis/sentinel.hpp"
#include "redis/listener.hpp"
#include "redis/subscriber.hpp"

namespace dlock::redis::detail {

struct engine_config {
    std::vector<dlock::detail::redis_endpoint> servers;
    std::chrono::milliseconds connect_timeout{};
    std::chrono::milliseconds command_timeout{};
    /// Per-server bound on an acquire attempt with several servers; unset = lease/200 clamped to
    /// [5 ms, 50 ms]. One server uses command_timeout.
    std::optional<std::chrono::milliseconds> node_timeout{};
    dlock::detail::drift_model drift{};
    std::string key_prefix;
    dlock::observer observer{};
    std::function<void(std::error_code, std::string_view)> error_handler{};
    /// client_options::idle_expiry: how long a name's fence counter (and a semaphore's number of
    /// permits) outlives the name's last grant (src/redis/lua/lib/fence.lua).
    std::chrono::milliseconds idle_expiry{std::chrono::hours(24)};
    /// Where each server of `servers` is reached (node.hpp): the source of its node, made once
    /// per server by the constructor. Unset: a fixed_address (the URL as given).
    std::function<std::unique_ptr<address_source>(const dlock::detail::redis_endpoint&)>
        address_source_for{};
    /// Sentinel (one server only): the resolver behind servers[0]'s address_source
    /// (sentinel_address); the engine also follows +switch-master with it and, in acquire,
    /// waits for a new master after a failover (docs/sentinel.md).
    std::shared_ptr<master_resolver> resolver{};
    /// The WAIT safeguard: a grant or renewal counts only once this many replicas acknowledged
    /// it within wait_timeout (WAIT; with wait_aof, WAITAOF too). 0: no WAIT.
    std::uint32_t wait_replicas = 0;
    std::chrono::milliseconds wait_timeout{0};
    bool wait_aof = false;
    /// Sentinel: how long an acquire that met a failed master asks for a new one.
    std::chrono::milliseconds failover_wait{std::chrono::seconds(60)};
};

class engine final : public dlock::detail::lease_owner,
                     public std::enable_shared_from_this<engine> {
public:
    /// Validates the config (errc::invalid_argument naming the field). Call start() next.
    explicit engine(engine_config config);
    ~engine() override;

    void start();
    /// Joins the background thread; leases still alive are reported lost (nobody renews them).
    void stop() noexcept;

    dlock::lease acquire_until(std::string_view name, const lock_request& request,
                               const lock_options& options, steady::time_point deadline,
                               std::error_code& ec) noexcept;
    /// Runs a command on server 0 (the single-instance client's command()).
    reply command(const std::vector<std::string>& args, std::error_code& ec) noexcept;
    /// backend::set_permits: sets the number of permits of semaphore `name` and wakes its
    /// waiters (src/redis/lua/semaphore_set_permits.lua). One server only (errc::unsupported on
    /// several).
    void set_permits(std::string_view name, std::uint32_t permits, std::error_code& ec) noexcept;
    /// backend::inspect: runs src/redis/lua/inspect.lua on every server at once; several servers
    /// give the quorum view (dlock::detail::merge_views).
    lock_info inspect(std::string_view name, std::error_code& ec) noexcept;
    /// backend::record_once: src/redis/lua/record_once.lua (SET if absent, then GET, in one
    /// script) on every server at once under "<key>:record". Several servers: the value stored on
    /// a majority (quorum::decide_record); none is errc::quorum_unreachable naming what each
    /// server answered.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept;

    /// backend::watch: src/redis/watch.hpp, on every server.
    std::unique_ptr<lock_watch> watch(std::string_view name, std::error_code& ec) noexcept;

    std::string key(std::string_view name) const {
        return config_.key_prefix + ":{" + std::string(name) + "}";
    }
    std::string fence(std::string_view name) const { return key(name) + ":fence"; }
    std::string channel(std::string_view name) const { return key(name) + ":released"; }
    std::size_t size() const noexcept { return servers_.size(); }
    std::size_t quorum() const noexcept { return servers_.size() / 2 + 1; }

    // lease_owner
    void release(dlock::detail::lease_core& lease, std::error_code& ec) noexcept override;
    void report_error(std::error_code ec, std::string_view what) noexcept override;
    void notify(const lock_event& event) noexcept override;
    /// Several servers: a node_failed event for each server that failed one vote on lock `name`
    /// (a batch whose `ec` is set; `why` overrides its message when not empty).
    void report_node_failure(std::string_view name, std::uint64_t token, const script_batch& b,
                             std::string_view why = {}) noexcept;

private:
    /// One voting member of the quorum over nodes (engine.cpp); servers_[i] is config_.servers[i].
    struct voter;

    /// One round of script calls on every server at once (acquire, release, renewal, inspect,
    /// record): how each server is reached and by when. A round on a subset of servers (a fence
    /// raise, a record write-back) runs on a round's connections with run_everywhere directly.
    struct round_plan {
        std::shared_ptr<const std::vector<script_call>> calls;
        /// The background thread's renewal connections instead of pooled command connections.
        bool renewals = false;
        /// Pooled: stop waiting for a free connection then (the round is then not `lent`).
        steady::time_point pool_wait = steady::time_point::max();
        /// Server i's deadline from `own` (its connection's default deadline when it was lent)
        /// and `connected` (when every connection was in hand); unset: `own`.
        std::function<steady::time_point(steady::time_point own, steady::time_point connected)>
            deadline{};
        /// Identity-check the servers that answered but do not count yet (check_identities), by
        /// now + identity_within, or (unset) by the latest default deadline of their connections.
        bool check_identities = false;
        std::optional<std::chrono::milliseconds> identity_within{};
        /// script_batch::messages_first on every server.
        bool messages_first = false;
    };
    /// A round's outcome: batches[i] is server i's, over conns[i] (pooled rounds).
    struct round {
        std::vector<node::pooled> conns;  // return them (round = {}) before waiting for more
        std::vector<script_batch> batches;
        bool lent = true;  // false: no free connection before pool_wait; nothing was sent
    };
    /// How server i's answer in a round counts toward a quorum.
    enum class answer {
        failed,     ///< no answer (batches[i].ec)
        uncounted,  ///< answered, but its identity is unchecked (see check_identities)
        counted,
    };
    answer answer_of(const round& r, std::size_t i) const noexcept;
    /// Runs `plan` on every server at once (run_everywhere), then tells each node that failed or
    /// answered READONLY (suspect_failures) and, if asked, checks new servers' identities.
    round run_on_every_server(const round_plan& plan);

    /// acquire_until's checks before any I/O (dlock::detail::check_acquire, then the kind on this
    /// many servers): the kind's protocol, or nullptr with `ec` set.
    const lock_protocol* check_request(std::string_view name, const lock_request& request,
                                       const lock_options& options, std::error_code& ec) const;
    /// One acquire_until call: its policy, waiter strategy (waiter.hpp) and subscription, and
    /// the I/O of each step of the loop (engine.cpp).
    struct acquire_run;
    struct attempt_outcome;
    /// One acquire script run on every server. `ticket_floor` (queued kinds): the highest queue
    /// ticket this waiter was told so far; a new queue entry gets a higher one. `waiter`
    /// (exclusive kind, one server): the id this waiter registers with among the mutex waiters
    /// while the lock is held (docs/redis-lock.md, "Waking one waiter"; on Redlock also its
    /// token: docs/redlock.md, "Waiting"); empty: none.
    attempt_outcome attempt(const lock_protocol& protocol, std::string_view name,
                            const std::string& token, std::chrono::milliseconds lease,
                            const lock_request& request, std::chrono::milliseconds node_timeout,
                            std::uint64_t ticket_floor = 0,
                            steady::time_point deadline = steady::time_point::max(),
                            const std::string& waiter = {});
    /// The undo of an attempt that was not granted. `registered`: the waiter id the attempt
    /// carried (Redlock: taken off every node, whose key it held goes to the next head).
    void release_everywhere(const lock_protocol& protocol, std::string_view name,
                            const std::string& token, std::chrono::milliseconds node_timeout,
                            const std::string& registered = {});
    /// A queued waiter (or a registered mutex waiter, `token` its waiter id) gives up, or its
    /// wait failed after a request may have reached the server:
    /// leaves the queue, releasing with hand-off if the server made it the owner meanwhile (also
    /// by an acquire whose reply was lost). Best effort: after a failure the queue entry goes
    /// with its liveness deadline and a grant with its lease. Several servers (Redlock's mutex
    /// waiters): on every server at once, each within `node_timeout`.
    void leave_queue(const lock_protocol& protocol, std::string_view name, const std::string& token,
                     std::chrono::milliseconds node_timeout) noexcept;
    /// KEYS of every script of `protocol` for lock `name`.
    std::vector<std::string> keys(const lock_protocol& protocol, std::string_view name) const;
    /// The fence's clock floor argument of the scripts (lib/fence.lua): "1" on one server, "0"
    /// for Redlock's counters, which a quorum combines.
    const char* clock_floor() const noexcept { return servers_.size() == 1 ? "1" : "0"; }
    /// Re-enters `held` (lock_request::reenter): one round trip, no waiting.
    dlock::lease reenter(const lock_protocol& protocol, std::string_view name, const lease& held,
                         const lock_options& options, std::error_code& ec);
    /// A new lease of `name`. `handed_off`: granted by a hand-off message (see track());
    /// `after_wait`: granted after waiting for another holder (lease_core::after_wait);
    /// `partial`: Redlock, granted by an attempt that a registered waiter made, on fewer than
    /// every node: it may still be queued on the others, whose late releases hand it their keys
    /// with the hand-off lease (track() keeps those as it keeps a hand-off grant's).
    dlock::lease grant(std::string_view name, const std::string& token, std::uint64_t fence,
                       const lock_options& options, lock_kind kind, steady::time_point sent,
                       steady::time_point valid_until, bool handed_off, bool after_wait,
                       bool partial = false);
    std::chrono::milliseconds node_timeout_for(std::chrono::milliseconds lease) const noexcept;
    /// Several servers: learns the run_id (INFO server) of every server whose identity is not
    /// known yet, over conns[i] (one per server), by `deadline`. Two URLs that reach one
    /// redis-server would give it two votes: the later one stays unverified and identity_error_
    /// says why. A server that does not answer stays unverified until it does.
    void check_identities(const std::vector<connection*>& conns, steady::time_point deadline);
    /// The connections of `batches` whose server answered but does not count yet (its identity
    /// is unchecked), by server index (nullptr elsewhere): what check_identities must ask.
    std::vector<connection*> newly_answering(const std::vector<script_batch>& batches) const;
    /// Whether server `i`'s answers count toward a quorum: its identity was checked.
    bool counts(std::size_t i) const noexcept;
    /// After a round on every server (batches[i] on server i): tells each node whose batch
    /// failed or carried a READONLY reply (node::suspect; a fixed address ignores it).
    void suspect_failures(const std::vector<script_batch>& batches) noexcept;

    /// Registers `lease` with the watchdog; `extend_soon`: a hand-off grant, which carries only
    /// the short hand-off lease, or a partial one (grant()) is extended within handoff_lease / 4
    /// (also a fixed lease), then again while a straggler node could still hand it its key
    /// (renew_due()).
    void track(const std::shared_ptr<dlock::detail::lease_core>& lease, bool extend_soon = false);
    void wake() noexcept;
    /// Whether `channel` is subscribed now on a quorum of subscribers (a hot lock's lingers).
    bool subscribed(const std::string& channel) const;
    /// The background thread must run no later than `by` (a renewal, a subscription change):
    /// wakes it only if it would otherwise sleep past `by`. Marks the client active: for
    /// active_window after the last such call the thread sleeps at most active_tick at a time,
    /// so work due later than that (a grant's first renewal, a channel's linger) costs no
    /// wake-up of its own on a busy lock's critical path.
    void wake_by(steady::time_point by) noexcept;
    void run(std::stop_token stop);
    /// The WAIT safeguard on `conn`, right after its writes: empty when wait_replicas replicas
    /// acknowledged them in time (or no WAIT is asked), else why not (naming k and how many did).
    std::string await_replicas(connection& conn, steady::time_point latest);
    steady::time_point renew_due(steady::time_point now);
    /// Runs the releases that are due again (pending_release); the time the next one is due.
    steady::time_point retry_releases(steady::time_point now);

    const engine_config config_;
    std::vector<std::unique_ptr<voter>> servers_;

    dlock::detail::mutex registry_mutex_;
    dlock::detail::lease_registry registry_ DLOCK_GUARDED_BY(registry_mutex_);
    std::atomic<steady::rep> worker_wakes_at_{steady::time_point::max().time_since_epoch().count()};
    std::atomic<steady::rep> last_active_{0};  // steady time of the last wake_by(); 0: none

    /// Owners of the reentrant kind with re-entries, by owner token: how many levels beyond the
    /// first are live, and whether a re-entry's outcome is unknown (its request may reach the
    /// server after we gave up on it, raising the server depth behind our back). The owner's last
    /// release then removes the lock whatever depth the server counts.
    struct reentrant_owner {
        std::size_t extra_levels = 0;
        bool depth_unknown = false;
    };
    dlock::detail::mutex reentrant_mutex_;
    std::unordered_map<std::string, reentrant_owner> reentrant_ DLOCK_GUARDED_BY(reentrant_mutex_);

    /// Redlock: the waiter id each holder that waited registered under, by owner token; its
    /// release takes that id off every server (src/redis/lua/release.lua, ARGV[6]).
    dlock::detail::mutex registered_mutex_;
    std::unordered_map<std::string, std::string> registered_as_ DLOCK_GUARDED_BY(registered_mutex_);

    /// One server (or Sentinel's master): a release the server did not answer. The release
    /// script only deletes our own token's grant, so the background thread may send it again
    /// until it is answered (after a Sentinel failover, on the new master) or the key has run out
    /// by itself (`until`): waiters then get the lock at once instead of at the lease's end.
    struct pending_release {
        std::shared_ptr<const std::vector<script_call>> calls;  // the release as first sent
        steady::time_point until;
        steady::time_point next_try;
        std::chrono::milliseconds gap{};  // doubles after each failed try, at most 2 s
    };
    dlock::detail::mutex pending_mutex_;
    std::vector<pending_release> pending_releases_ DLOCK_GUARDED_BY(pending_mutex_);

    dlock::detail::mutex identity_mutex_;  // also guards voter::run_id
    std::string identity_error_ DLOCK_GUARDED_BY(identity_mutex_);
    std::atomic<bool> identities_pending_{false};

    /// Names this client in its queued waiters' tokens: their hand-off channel (engine.cpp).
    const std::string client_tag_;
    dlock::detail::event_fd wake_fd_;  // wakes the background thread's poll
    /// One for the client (its nodes carry every release), or on Redlock one per node, in node
    /// order (each hands its own key to its own head: docs/redlock.md, "Waiting").
    std::vector<std::unique_ptr<subscriber>> subscribers_;
    dlock::detail::engine_thread worker_;
};

}  // namespace dlock::redis::detail
