// One ZooKeeper session (a zhandle_t of the C client) and what waiters need from it: its state,
// the validity bound it proves (docs/zookeeper.md, "Sessions, validity and loss"), one-shot node
// watches, and orphan clean-up. The C client calls on_event and completions on its completion
// thread; they only take mutex_ and notify, never call ZooKeeper synchronously.
//
// Lock order: engine's mutex_ before session::mutex_; callbacks release mutex_ before waking.
#pragma once

#include <dlock/detail/thread_safety.hpp>
#include <zookeeper/zookeeper.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/time.hpp"

namespace dlock::zk::detail {

using dlock::detail::steady;
using std::chrono::milliseconds;

/// A node (known path) or a guid under a parent (unknown create outcome) to delete.
struct cleanup_item {
    std::string parent;
    std::string guid;  ///< delete every child of parent that starts with it (when path is empty)
    std::string path;  ///< the exact node to delete
};

/// Our node of one acquire, created in protection mode: its name starts with a guid unique to the
/// acquire, so a create whose reply was lost with the connection (it may or may not have landed) is
/// found again by that guid once reconnected instead of being made twice, and whatever is left of
/// it can be deleted by guid when the acquire gives up (docs/zookeeper.md, "Lost create replies").
struct protected_node {
    std::string parent;
    std::string guid;
    std::string prefix;  ///< starts with guid; the server appends the sequence
    /// Our child's name once created or found; empty: none (yet).
    std::string name{};
    std::uint64_t czxid = 0;
    /// A create's outcome is unknown: look for it by guid before creating another.
    bool in_doubt = false;
    /// Some create of this acquire was in doubt: a duplicate of ours may still land, so only a
    /// fresh getChildren (which deletes it) may grant (engine::attempt). Never cleared.
    bool doubted = false;

    bool created() const noexcept { return !name.empty(); }
    std::string path() const { return parent + "/" + name; }
    /// The node is gone (its session ended, or someone deleted it): none is known or in doubt.
    void forget() noexcept {
        name.clear();
        czxid = 0;
        in_doubt = false;
    }
};

/// A getChildren that went out with a create (session::create_protected).
struct children_listing {
    bool sent = false;
    int rc = ZOK;
    std::vector<std::string> children;
};

struct cleanup_op;
struct node_op;

class session {
public:
    /// `wake` is called (from the C client's thread) on every state change and heartbeat answer.
    explicit session(std::function<void()> wake);
    /// Closes the handle (joins the C client's threads). Never from a ZooKeeper callback.
    ~session();
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    /// zookeeper_init and wait for the session until `deadline`. false (with `why`) on failure;
    /// the handle is then closed.
    bool open(const std::string& hosts, milliseconds timeout, steady::time_point deadline,
              std::string& why);
    /// addauth digest; waits for the answer until `deadline`. ZooKeeper's rc, or ZOPERATIONTIMEOUT.
    int add_digest(const std::string& digest, steady::time_point deadline);
    /// Closes the handle; afterwards every call fails with ZCLOSING. Idempotent.
    void close() noexcept;

    /// Runs `fn(zh)` with the handle kept open (shared lock against close()); ZCLOSING if closed.
    template <class Fn>
    int with_handle(Fn&& fn) {
        dlock::detail::shared_lock lock(handle_mutex_);
        if (zh_ == nullptr) return ZCLOSING;
        return fn(zh_);
    }

    bool connected() const;
    /// Expired, auth failed or closed: its ephemeral nodes are (or will be) gone.
    bool dead() const;
    /// The session timeout the server granted.
    milliseconds timeout() const noexcept { return timeout_; }

    /// The leader cannot expire the session before `touched` + timeout (docs/zookeeper.md,
    /// "Sessions, validity and loss": only the session's creation and settled heartbeats prove
    /// this; a plain answer from our server does not).
    void confirm(steady::time_point touched) noexcept;
    /// touched_last + timeout - drift(timeout).
    steady::time_point valid_until() const noexcept;
    /// Past valid_until(): the leader may have expired the session, even if it answers again
    /// (it may also have reconnected in time). Its leases are lost; it serves no new grant (a
    /// grant on it would start lost): the client replaces it.
    bool stale(steady::time_point now) const noexcept { return now >= valid_until(); }
    /// A heartbeat has been waiting for its answer for longer than two heartbeat periods: the
    /// leader may be out of reach even though our server still answers (leases: uncertain).
    bool overdue(steady::time_point now) const noexcept;
    /// How much older than an answered heartbeat's send time the answer of an earlier one must
    /// be for that earlier one to prove a touch at the leader: timeout / 2, which is at least one
    /// tickTime (the server clamps the timeout to >= 2 ticks), i.e. two of the follower's touch
    /// reports (one every tickTime / 2).
    milliseconds settle_period() const noexcept { return timeout_ / 2; }
    /// The heartbeat period: timeout / 20 (min 10 ms). Validity runs between about
    /// timeout / 2 - 2 periods (0.4 timeout) and timeout ahead of now while heartbeats flow.
    milliseconds heartbeat_period() const noexcept;

    /// The session is known to be gone (a request answered ZSESSIONEXPIRED).
    void mark_dead() noexcept;
    /// Waits up to `bound` for any state change (or cancel).
    void wait_change(milliseconds bound, const std::stop_token& cancel);

    /// Waits until connected, dead, `deadline` or `cancel`; true if connected.
    bool wait_connected(steady::time_point deadline, const std::stop_token& cancel);

    /// One-shot watches on nodes: begin before watch_node (returns the event count seen), wait,
    /// end when done. wait returns when the node's watch fired, the session changed state, the
    /// deadline passed or cancel was requested: true when the watch fired because the node was
    /// deleted and the session stayed connected and alive throughout (the deletion is then a
    /// fact of the server's order, delivered on this session before anything later).
    std::uint64_t watch_begin(const std::string& path);
    bool watch_wait(const std::string& path, std::uint64_t seen, steady::time_point deadline,
                    const std::stop_token& cancel);
    /// What ended a wait on two watches.
    enum class woken : std::uint8_t {
        other,    ///< a state change, the deadline, cancel, or `path` changed but is still there
        deleted,  ///< `path` was deleted, the session connected and alive throughout
        also,     ///< `also` fired and `path` did not, the session connected and alive throughout
    };
    /// watch_wait on `path`, and on `also` (begun as well) unless it is null.
    woken watch_wait(const std::string& path, std::uint64_t seen, const std::string* also,
                     std::uint64_t also_seen, steady::time_point deadline,
                     const std::stop_token& cancel);
    void watch_end(const std::string& path);
    /// A watch on node `path` (its data: it fires when the node is deleted or its data set), read
    /// with getData rather than exists, inside with_handle: a node already gone answers ZNONODE
    /// and leaves no watch behind, where exists would leave one for a creation that never comes
    /// (a sequential node's name is never made again) on the server until the session ends. A
    /// node we may not read (another identity's ACL) answers ZNOAUTH.
    int watch_node(zhandle_t* zh, const std::string& path, Stat* stat);
    /// watch_node(path) sent without waiting for its answer. A watch begun on `path`
    /// (watch_begin) then fires for the node's events, and also when the answer is anything but
    /// ZOK or ZNOAUTH (the node is gone, or the request failed): its waiter looks again either
    /// way. ZNOAUTH fires nothing: no event of that node would reach us.
    void watch_probe(const std::string& path);

    /// The watcher for the session and for node watches (ctx = this session).
    static void on_event(zhandle_t* zh, int type, int state, const char* path, void* ctx);

    /// Heartbeat (a `sync` through the leader), from the background thread: sends one if none is
    /// in flight and `now` is past its due time. Returns when the next is due.
    steady::time_point heartbeat(steady::time_point now);

    /// Nodes we hold: a deletion we did not ask for (an administrator, another client) is
    /// reported through take_vanished() and wakes the background thread. own() also sets the
    /// watch (asynchronously); the watch is set again after anything else consumes it (a data
    /// change, a dropped watch) and after a failed attempt, and a node already gone when the
    /// watch is set counts as deleted. disown() before our own delete.
    void own(const std::string& path);
    /// Sets the watch own() sets, before a grant: a waiter sends it with its first wait, so a
    /// grant by hand-off sends nothing more (own() finds it set, and a deletion seen before then
    /// leaves no watch, so own() sets one again and finds the node gone). Counts no holder;
    /// disown() drops it.
    void prewatch(const std::string& path);
    void disown(const std::string& path);
    std::vector<std::string> take_vanished();

    /// Sets our node `path`'s data to "1" (wakes the semaphore waiter that watches it),
    /// asynchronously; retried after a connection loss until answered or the session ends (then
    /// the node is gone, which wakes the waiter as well).
    void wake_successor(const std::string& path);

    /// Creates `node` as an ephemeral sequential child `prefix` + sequence of `parent` with `acl`
    /// (protection mode). If a previous create of it is in doubt, first looks for a child of
    /// `parent` starting with its guid and takes that one. Returns ZOK with node.name and
    /// node.czxid set (at once if it is created() already). Otherwise ZooKeeper's rc and nothing
    /// is known to be created: ZNONODE when `parent` is missing; after a connection loss or
    /// timeout node.in_doubt is set and the caller calls again once reconnected (on this session:
    /// a dead session took any such node with it, so the caller forget()s it then).
    /// With `listing`, a fresh create (none in doubt) goes out together with a getChildren of
    /// `parent` (ZooKeeper answers a session's requests in order, so the listing includes the
    /// node): then listing->rc is the getChildren's rc and listing->children its answer, and
    /// listing->sent is set. Otherwise listing->sent stays false and the caller lists itself.
    int create_protected(protected_node& node, const ACL_vector* acl,
                         children_listing* listing = nullptr);

    /// Deletes node `path` (any version) now. If that fails for another reason than the node or
    /// the session being gone (connection loss, timeout: the outcome is unknown), the delete is
    /// queued and retried by run_cleanup once reconnected, until answered or the session ends
    /// (which deletes its ephemeral nodes too). Returns the first attempt's rc (ZOK; ZNONODE:
    /// it was already gone).
    int remove_guaranteed(const std::string& path);
    /// An acquire gives `node` up: deletes its node if created() (remove_guaranteed), and if a
    /// create is in doubt, queues the deletion of every child of its parent named with its guid.
    /// Nothing to do on a dead session.
    void remove_guaranteed(const protected_node& node);

    /// Queue nodes to delete once connected (background thread sends them: run_cleanup).
    void queue_cleanup(cleanup_item item);
    /// Background thread: sends queued deletions, watch re-arms and wakes (once connected).
    void run_cleanup();

private:
    /// Keep a request in in_flight_ / node_in_flight_ from before it is sent until its
    /// completion (or an unsent request's sender) takes it back with finish(); returns it.
    cleanup_op* track(std::unique_ptr<cleanup_op> op);
    node_op* track(std::unique_ptr<node_op> op);
    /// A cleanup request's completion takes it back from in_flight_; nullptr if the session
    /// already let it go.
    std::unique_ptr<cleanup_op> finish(cleanup_op* op);

    static void on_heartbeat(int rc, const char* value, const void* data);
    /// Heartbeat sent at `sent` answered at `answered`: confirms the latest earlier heartbeat
    /// whose answer came at least settle_period() before `sent`.
    void settle(steady::time_point sent, steady::time_point answered);
    void requeue(cleanup_item item);
    /// A request on one of our nodes: a watch (re-)arm, or a successor wake; or a probe of a node
    /// ahead of ours (watch_probe).
    enum class node_request { watch, wake, probe };
    void send(node_request kind, const std::string& path);
    void resend(node_request kind, std::string path);
    /// A probe's answer other than ZOK: its watch (if still waited on) fires.
    void probe_failed(const std::string& path, int rc);
    /// The watch begun on `path`, if any, counts one more event (a deletion when `deleted`).
    void fire_locked(const std::string& path, bool deleted) DLOCK_REQUIRES(mutex_);
    std::unique_ptr<node_op> finish(node_op* op);
    static void on_wake_set(int rc, const Stat* stat, const void* data);
    static void on_watch_read(int rc, const char* value, int len, const Stat* stat,
                              const void* data);
    static void on_probe_read(int rc, const char* value, int len, const Stat* stat,
                              const void* data);

    std::function<void()> wake_;
    dlock::detail::shared_mutex handle_mutex_;  // keeps zh_ open while a call uses it
    zhandle_t* zh_ DLOCK_GUARDED_BY(handle_mutex_) = nullptr;
    milliseconds timeout_{0};
    std::atomic<steady::rep> answered_sent_{0};
    std::atomic<bool> heartbeat_in_flight_{false};
    std::atomic<steady::rep> heartbeat_sent_{0};
    steady::time_point next_heartbeat_{};  // background thread only
    struct answered_heartbeat {
        steady::time_point sent, answered;
    };
    dlock::detail::mutex settle_mutex_;
    std::deque<answered_heartbeat> answered_ DLOCK_GUARDED_BY(settle_mutex_);  // oldest first

    struct watch {
        std::uint64_t fired = 0;
        int waiters = 0;
        bool deleted = false;  // a ZOO_DELETED_EVENT fired (a node's name never comes back)
    };
    mutable dlock::detail::mutex mutex_;
    std::condition_variable_any changed_;  // with a detail::unique_lock (BasicLockable)
    int state_ DLOCK_GUARDED_BY(mutex_) = 0;
    bool dead_ DLOCK_GUARDED_BY(mutex_) = false;
    std::uint64_t state_gen_ DLOCK_GUARDED_BY(mutex_) = 0;
    std::unordered_map<std::string, watch> watches_ DLOCK_GUARDED_BY(mutex_);
    std::vector<cleanup_item> cleanup_ DLOCK_GUARDED_BY(mutex_);
    // Cleanup requests sent, not answered.
    std::vector<std::unique_ptr<cleanup_op>> in_flight_ DLOCK_GUARDED_BY(mutex_);
    // Node requests to (re)send; those sent, not answered.
    std::vector<std::pair<node_request, std::string>> node_requests_ DLOCK_GUARDED_BY(mutex_);
    std::vector<std::unique_ptr<node_op>> node_in_flight_ DLOCK_GUARDED_BY(mutex_);
    std::unordered_map<std::string, int> owned_ DLOCK_GUARDED_BY(mutex_);  // path -> own() count
    std::vector<std::string> vanished_ DLOCK_GUARDED_BY(mutex_);
    int auth_rc_ DLOCK_GUARDED_BY(mutex_) = 1;  // 1 = no answer yet
};

}  // namespace dlock::zk::detail
