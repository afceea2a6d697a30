// The ZooKeeper lock service behind dlock::zk::client (docs/zookeeper.md): the one acquire loop
// of every recipe (the I/O around zk::detail::driver), the registry of held nodes, and the one
// background thread per client (heartbeats, loss, max_hold, orphan clean-up, dead sessions).
#pragma once

#include <dlock/detail/thread_safety.hpp>
#include <dlock/zk/client.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/acquire_policy.hpp"
#include "core/engine_skeleton.hpp"
#include "core/lease_core.hpp"
#include "core/lease_registry.hpp"
#include "zk/recipe.hpp"
#include "zk/session.hpp"

namespace dlock::zk::detail {

using dlock::detail::lease_core;

class engine final : public dlock::detail::lease_owner,
                     public std::enable_shared_from_this<engine> {
public:
    explicit engine(client_options options);  // validates; throws dlock::error
    ~engine() override;

    void start();
    /// Stops the background thread, loses every live lease and closes the sessions.
    void stop() noexcept;

    dlock::lease acquire_until(std::string_view name, const lock_request& request,
                               const lock_options& options, steady::time_point deadline,
                               std::error_code& ec) noexcept;

    /// Sets semaphore `name`'s number of permits (the data of its persistent parent node).
    void set_permits(std::string_view name, std::uint32_t permits, std::error_code& ec) noexcept;

    /// backend::inspect: reads the lock node's data (a semaphore's permits) and children, and
    /// the holders' czxid (src/zk/inspect.cpp). Writes nothing.
    lock_info inspect(std::string_view name, std::error_code& ec) noexcept;
    /// backend::watch: an exists and a child watch on the lock node (src/zk/inspect.cpp).
    std::unique_ptr<lock_watch> watch(std::string_view name, std::error_code& ec) noexcept;

    /// backend::record_once: a persistent node beside the lock nodes (record_path) created with
    /// the value as its data, or, when it exists, its data. ZooKeeper's create is atomic, so
    /// of two first users one creates and the other reads what it stored.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept;
    /// "<base>/<encoded name>%record": encode_name never writes '%' before anything but two hex
    /// digits, so no lock node has this name.
    std::string record_path(std::string_view name) const;

    void release(lease_core& lease, std::error_code& ec) noexcept override;
    void report_error(std::error_code ec, std::string_view what) noexcept override;
    void notify(const lock_event& event) noexcept override;

    const client_options& options() const noexcept { return options_; }
    std::string lock_path(std::string_view name) const;
    /// The current session, opened (or replaced) first if needed.
    std::shared_ptr<session> session_for(std::error_code& ec);

private:
    /// One node we hold; shared by every re-entry level's lease.
    struct held_node {
        std::shared_ptr<session> owner;
        std::string path;
        std::uint64_t czxid = 0;
        steady::time_point cap_valid = steady::time_point::max();  // granted + cap - drift

        // The engine's mutex_ guards these. A nested type cannot name it in DLOCK_GUARDED_BY,
        // so they are reached through accessors that require the mutex passed in.
        int& depth([[maybe_unused]] const dlock::detail::mutex& m) DLOCK_REQUIRES(m) {
            return depth_;
        }
        /// Removal already decided (loss, max_hold).
        bool& deleted([[maybe_unused]] const dlock::detail::mutex& m) DLOCK_REQUIRES(m) {
            return deleted_;
        }

    private:
        int depth_ = 1;
        bool deleted_ = false;
    };
    struct entry {
        std::weak_ptr<lease_core> lease;
        std::shared_ptr<held_node> node;
    };
    /// A session that holds leases: their keys, and its health (connected, heartbeats answered)
    /// and death as of the last round, whose change updates every one of them at once.
    struct held_session {
        std::shared_ptr<session> s;
        std::unordered_set<lease_core*> leases;
        bool healthy = true;
        bool dead = false;  // its leases were lost for it already
    };

    int ensure_path(session& s, const std::string& path, int mode);
    /// One acquire call's state between the steps of its acquire_policy.
    struct attempt_state {
        const driver& recipe;
        std::string_view name;
        std::string quoted;   // for messages
        std::uint32_t limit;  // a semaphore's permits when none is set yet
        const lock_options& options;
        steady::time_point deadline;
        std::shared_ptr<session> s{};
        protected_node ours{};
        std::uint64_t permits = 0;      // the semaphore's number of permits, read by each attempt
        bool permits_reported = false;  // a number other than `limit` was reported (once)
        std::vector<std::string> children{};
        steady::time_point sent{};  // the latest getChildren's send time (or vacated's wait end)
        standing where{};           // what it found
        int wait_rc = ZOK;          // setting the latest watch: a failure ends the next attempt
        bool vacated = false;       // the wait saw the deletion of the last node ahead of ours
        std::string failure{};      // a failed attempt's message
    };
    /// The one acquire loop of every kind (docs/zookeeper.md, "The recipe"): acquire_policy's
    /// steps, with the attempts and waits of `recipe`. `limit`: a semaphore's permits when none
    /// is set yet.
    dlock::lease acquire(std::string_view name, const driver& recipe, std::uint32_t limit,
                         const lock_options& options, steady::time_point deadline,
                         std::error_code& ec);
    /// One attempt: our node created (or found again) and located among the children, retrying
    /// connection and session trouble until answered, canceled or past the deadline. Granted,
    /// contended (a.where says what to watch) or failed (a.failure says why).
    dlock::detail::attempt_report attempt(attempt_state& a);
    /// Waits, with a one-shot watch, for what `where` says decides our turn, until it fired, the
    /// session changed state, `deadline` or `cancel`. ZooKeeper's rc of setting the watch.
    /// `vacated`: ours holds, known without another listing: the watched node was
    /// where.watch_is_last and its deletion arrived on the session while it stayed connected
    /// (session::watch_wait), or a look again on where.refresh's going found ours first.
    int wait_turn(session& s, const protected_node& ours, standing& where, std::uint64_t permits,
                  steady::time_point deadline, const std::stop_token& cancel, bool& vacated);
    /// wait_turn's wait on a lock node's `watched` (begun at `seen`), and on where.refresh: when
    /// that goes first, reads the children again and goes on waiting while `watched` is still
    /// the node ahead of ours (where updated). True when ours holds (`vacated`).
    bool wait_for(session& s, const protected_node& ours, standing& where,
                  const std::string& watched, std::uint64_t seen, steady::time_point deadline,
                  const std::stop_token& cancel);
    /// The semaphore's permits from its parent's data; creates the parent (with `limit`) or sets
    /// empty data. ZooKeeper's rc.
    int read_limit(session& s, const std::string& parent, std::uint32_t limit, std::uint64_t& out);
    dlock::lease reenter(std::string_view name, const lock_request& request,
                         const lock_options& options, std::error_code& ec);
    dlock::lease grant(std::string_view name, lock_kind kind, const lock_options& options,
                       const std::shared_ptr<session>& s, std::string path, std::uint64_t czxid,
                       steady::time_point sent);
    void wake() noexcept;
    void run(std::stop_token stop);
    /// Registers a grant or a re-entry level.
    void track(const std::shared_ptr<lease_core>& core, std::shared_ptr<held_node> node,
               steady::time_point now) DLOCK_REQUIRES(mutex_);
    /// Forgets a released lease.
    void untrack(lease_core* core) noexcept DLOCK_REQUIRES(mutex_);
    /// stop() in a forked child: keeps the parent's objects alive, untouched.
    void keep_after_fork() noexcept;
    /// When to look at a lease valid until `bound` again.
    static steady::time_point revisit_at(steady::time_point now, steady::time_point bound);
    /// One round of the background thread over the leases: events of their sessions, then the
    /// leases the registry has due. Returns when the next is due.
    steady::time_point check_leases(steady::time_point now);
    const ACL_vector* acl() const noexcept;

    client_options options_;
    zk_endpoint endpoint_;

    dlock::detail::mutex connect_mutex_;  // serialises opening a session; taken before mutex_
    dlock::detail::mutex mutex_;          // also guards held_node's depth and deleted
    std::shared_ptr<session> session_ DLOCK_GUARDED_BY(mutex_);
    // Every live grant and level; the sessions holding them.
    std::unordered_map<lease_core*, entry> registry_ DLOCK_GUARDED_BY(mutex_);
    std::unordered_map<session*, held_session> sessions_ DLOCK_GUARDED_BY(mutex_);
    dlock::detail::lease_registry leases_ DLOCK_GUARDED_BY(mutex_);  // their due times
    std::condition_variable_any worker_cv_;  // with a detail::unique_lock (BasicLockable)
    bool wake_ DLOCK_GUARDED_BY(mutex_) = false;
    // When the background thread will look next on its own (it sleeps until then unless woken);
    // min() while it is awake, so that every change is seen. A grant whose first look is due
    // later needs no wake-up: one fewer thread switch on each acquire.
    steady::time_point worker_wakes_at_ DLOCK_GUARDED_BY(mutex_) = steady::time_point::min();
    dlock::detail::engine_thread worker_;
};

}  // namespace dlock::zk::detail
