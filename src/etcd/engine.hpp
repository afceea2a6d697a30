// The etcd lock service behind dlock::etcd::client (docs/etcd.md): the client's etcd lease (its
// session) and its keep-alive, the acquire loop of the recipe (the I/O around
// core/acquire_policy), the registry of held keys, and the one background thread per client
// (keep-alive, loss, max_hold, fenced deletes that must still happen).
//
// The lifecycle, the acquire prologue and the error mapping are the shared engine skeleton's
// (core/engine_skeleton.hpp), as in the Redis and ZooKeeper engines.
#pragma once

#include <dlock/detail/thread_safety.hpp>
#include <dlock/etcd/client.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/acquire_policy.hpp"
#include "core/engine_skeleton.hpp"
#include "core/lease_core.hpp"
#include "etcd/recipe.hpp"
#include "etcd/url.hpp"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace dlock::etcd::detail {

using dlock::detail::lease_core;
using dlock::detail::steady;
using std::chrono::milliseconds;

struct stubs;             // the generated gRPC stubs of one endpoint (engine.cpp)
class keep_alive_stream;  // the client's one LeaseKeepAlive stream (engine.cpp)

/// The client's etcd lease: every key it puts lives by it (concurrency.Session).
struct session {
    std::int64_t id = 0;
    milliseconds ttl{};  // as granted
    // The engine's mutex_ guards the rest.
    steady::time_point
        valid_until{};  // send time of the last acknowledged keep-alive + ttl - drift
    steady::time_point next_keep_alive{};
    bool healthy = true;     // the last keep-alive was answered
    bool dead = false;       // expired or revoked: its keys are gone
    bool check_due = false;  // a keep-alive was answered: check_keys() runs next
};

class engine final : public dlock::detail::lease_owner,
                     public std::enable_shared_from_this<engine> {
public:
    explicit engine(client_options options);  // validates; throws dlock::error
    ~engine() override;

    void start();
    /// Stops the background thread, loses every live lease and revokes the session.
    void stop() noexcept;

    dlock::lease acquire_until(std::string_view name, const lock_request& request,
                               const lock_options& options, steady::time_point deadline,
                               std::error_code& ec) noexcept;

    /// backend::inspect: the keys under the lock's prefix and the permits key, in one Txn, by
    /// the recipe's rules (recipe.hpp). Writes nothing.
    lock_info inspect(std::string_view name, std::error_code& ec) noexcept;
    /// backend::watch: a watch of the lock's key range and its permits key.
    std::unique_ptr<lock_watch> watch(std::string_view name, std::error_code& ec) noexcept;
    /// backend::set_permits: puts the permits key (no lease).
    void set_permits(std::string_view name, std::uint32_t permits, std::error_code& ec) noexcept;

    /// backend::record_once: the key record_key(name), put unless it exists (one Txn), without a
    /// lease.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept;
    std::string record_key(std::string_view name) const;

    void release(lease_core& lease, std::error_code& ec) noexcept override;
    void report_error(std::error_code ec, std::string_view what) noexcept override;
    void notify(const lock_event& event) noexcept override;

    const client_options& options() const noexcept { return options_; }
    std::string key_prefix(std::string_view name) const;

private:
    friend class keep_alive_stream;
    struct held_key {
        std::weak_ptr<lease_core> lease;
        std::shared_ptr<session> owner;
        std::string prefix;      // the lock's key prefix: its local turn (turns_)
        std::uint64_t turn = 0;  // that turn's id while this grant has it; 0 once given back
        std::string key;
        std::int64_t revision = 0;  // the key's create revision: the fencing token
        std::string limit_key;      // permits: the semaphore's permits key (delete_fenced)
        steady::time_point cap_valid = steady::time_point::max();  // granted + cap - drift
    };
    /// A delete of our key, fenced on its create revision, that could not be confirmed: retried by
    /// the background thread; the lock's local turn is held until it is done.
    struct pending_delete {
        std::shared_ptr<session> owner;
        std::string prefix;
        std::uint64_t turn = 0;  // the local turn it holds
        std::string key;
        std::int64_t revision = 0;  // 0: unknown (a put whose reply was lost)
        std::string limit_key;      // permits: the semaphore's permits key (delete_fenced)
    };
    struct attempt_state;
    class ending_watch;

    /// Runs `call` on the current endpoint, moving to the next one and retrying while the answer
    /// is UNAVAILABLE or late, until `deadline` (each try bounded by command_timeout). `answered`,
    /// when given, is set to the endpoint whose answer (or failure) is returned: after a failure
    /// at the deadline the current endpoint is already the next one.
    grpc::Status rpc(steady::time_point deadline,
                     const std::function<grpc::Status(stubs&, grpc::ClientContext&)>& call,
                     const stubs** answered = nullptr);
    /// With a user in the URL: the auth token (Authenticate, on first need), "" without auth.
    /// `stale` is a token etcd called invalid: a new one is asked for unless another thread did
    /// already. A refused authentication is UNAUTHENTICATED naming the user (never the password).
    grpc::Status auth_token(stubs& e, steady::time_point deadline, const std::string& stale,
                            std::string& token);
    /// Adds the token, if any, to a call's metadata (etcd reads "token").
    void add_token(grpc::ClientContext& ctx);
    /// The current session, granted first if there is none alive (bounded by connect_timeout).
    std::shared_ptr<session> session_for(std::error_code& ec);
    dlock::detail::attempt_report attempt(attempt_state& a);
    /// An attempt while our key is in place (an earlier attempt of this session put it, and we
    /// waited): reads the queue again in one linearizable read, no write. Decides when our key is
    /// there with its create revision and our lease; nullopt when it is not (or the permits key
    /// is not a number): the put of attempt() then handles it as before.
    std::optional<dlock::detail::attempt_report> look_again(attempt_state& a);
    /// Waits, with a watch that misses nothing after `a.seen`, for what `a.where` says decides our
    /// turn: the deletion of the key we queue behind (or, for a semaphore, also its put), or,
    /// first in a semaphore's line, any deletion under the prefix and a put of the permits key.
    void wait_turn(attempt_state& a, steady::time_point until);
    /// wait_turn's watch of a.where.watch, from now, was made at revision `created`: whether that
    /// key changed (went, or was put again) after our read (a.seen) and by then, which the watch
    /// does not report. Then, or if the read fails, the wait ends and the attempt looks again.
    bool watch_changed_meanwhile(const attempt_state& a, std::int64_t created,
                                 steady::time_point bound);
    /// recursive_mutex: one more level of a live reentrant grant of this client (no request).
    dlock::lease reenter(std::string_view name, const lock_request& request,
                         const lock_options& options, std::error_code& ec);
    /// permits: the semaphore's number of permits from the permits key, put as `a.limit` when
    /// none is set (0 and a.failure set on failure).
    bool read_permits(attempt_state& a);
    /// A semaphore grant with a waiter behind it: puts our key again (same lease, same create
    /// revision) so that the waiter watching it looks again.
    void wake_successor(const attempt_state& a);
    /// The revision of the store now and the entries under `prefix` plus the permits key's
    /// value, in one Txn.
    grpc::Status read_queue(const std::string& prefix, const std::string& limit_key,
                            std::vector<dlock::detail::queue_entry>& entries,
                            std::optional<std::string>& limit, std::int64_t& revision);
    friend class etcd_watch;
    /// Deletes `key` if its create revision is `revision` (0: if it is ours at all). false when
    /// the outcome is unknown. With a semaphore's `limit_key`, in the same Txn: when `key` is the
    /// last key under `prefix`, the permits key goes with it (nothing of an idle semaphore stays).
    bool delete_fenced(const std::string& key, std::int64_t revision, const session& owner,
                       steady::time_point deadline, bool& was_there, const std::string& prefix = {},
                       const std::string& limit_key = {});
    /// Takes the local turn of lock `prefix` for `ticket` (0: a new ticket is drawn and stored
    /// there): true when it is ticket's, false while another call of this client has it or an
    /// earlier ticket waits for it (the recipe's key is one per lease, so one per client and
    /// name; calls take turns first come, first served).
    bool take_turn(const std::string& prefix, std::uint64_t& ticket);
    /// Gives the turn back, if `turn` (a ticket that took it) still has it.
    void leave_turn(const std::string& prefix, std::uint64_t turn) noexcept;
    /// A waiting ticket gives up its place.
    void drop_ticket(const std::string& prefix, std::uint64_t ticket) noexcept;

public:
    /// How many acquire calls of this client wait for their turn on `name` inside the client.
    std::size_t waiting_here(std::string_view name);

private:
    /// Drives the client's one LeaseKeepAlive stream for session `s` (background thread only):
    /// reopens it when it broke or an answer is late (the session is then unhealthy), and sends
    /// the next keep-alive when it is due and none awaits its answer. Returns when it next needs
    /// to run.
    steady::time_point keep_alive(const std::shared_ptr<session>& s, steady::time_point now);
    /// The stream's answer to the keep-alive in flight (from a gRPC thread).
    void keep_alive_answered(std::int64_t id, std::int64_t ttl) noexcept;
    /// The stream broke or finished (from a gRPC thread): the background thread reopens it.
    void keep_alive_broken() noexcept;
    void close_stream() noexcept;
    /// A keep-alive round confirmed the session: checks that every key it holds still exists
    /// with its create revision (one Txn); a missing one is a lost lease.
    void check_keys(const std::shared_ptr<session>& s,
                    std::vector<std::pair<std::shared_ptr<lease_core>, lost_reason>>& lost);
    steady::time_point check_leases(steady::time_point now);
    /// The deadline of a request the background thread makes (a key check, a pending delete):
    /// command_timeout from `now`, but never past the validity of a lock it holds, so the thread
    /// is free to report that lock lost on time.
    steady::time_point background_deadline(steady::time_point now);
    void run_pending_deletes();
    /// Cancels and finishes the watches whose wait is over (background thread, and stop()).
    void end_watches();
    void run(std::stop_token stop);
    void wake() noexcept;
    void cancel_waits(const session* s) noexcept DLOCK_REQUIRES(mutex_);
    void keep_after_fork() noexcept;

    client_options options_;
    etcd_endpoint endpoint_;
    std::vector<std::shared_ptr<stubs>> endpoints_;
    std::atomic<std::size_t> current_{0};

    dlock::detail::mutex auth_mutex_;  // serialises Authenticate; never taken with mutex_
    std::string token_ DLOCK_GUARDED_BY(auth_mutex_);
    dlock::detail::mutex connect_mutex_;  // serialises granting a session; taken before mutex_
    dlock::detail::mutex mutex_;          // also guards every session's mutable fields
    std::shared_ptr<session> session_ DLOCK_GUARDED_BY(mutex_);
    std::unordered_map<lease_core*, held_key> registry_ DLOCK_GUARDED_BY(mutex_);
    std::vector<pending_delete> pending_ DLOCK_GUARDED_BY(mutex_);
    // The watches in progress (their contexts, canceled when the session ends or on stop).
    std::unordered_map<grpc::ClientContext*, const session*> waits_ DLOCK_GUARDED_BY(mutex_);
    // The watches whose wait is over, to be canceled and finished by the background thread.
    std::vector<std::unique_ptr<ending_watch>> ending_ DLOCK_GUARDED_BY(mutex_);
    // The lock prefixes whose turn in this client is taken: the recipe's key is one per lease,
    // so two acquires of one name by one client must not both use it.
    struct turn_line {
        std::uint64_t owner = 0;              // the ticket that has the turn, 0 when free
        std::deque<std::uint64_t> waiting{};  // the tickets waiting for it, in order
    };
    std::unordered_map<std::string, turn_line> turns_ DLOCK_GUARDED_BY(mutex_);
    std::uint64_t last_turn_ DLOCK_GUARDED_BY(mutex_) = 0;
    // The client's one LeaseKeepAlive stream, for every lock of every session it has: used by
    // the background thread only (and by stop() once that thread is joined).
    std::unique_ptr<keep_alive_stream> stream_;
    // The keep-alive in flight on it (at most one): its session, send time and answer deadline.
    std::shared_ptr<session> ka_session_ DLOCK_GUARDED_BY(mutex_);
    steady::time_point ka_sent_ DLOCK_GUARDED_BY(mutex_){};
    steady::time_point ka_late_ DLOCK_GUARDED_BY(mutex_){};
    bool ka_broken_ DLOCK_GUARDED_BY(mutex_) = false;
    std::condition_variable_any turn_cv_;
    std::condition_variable_any worker_cv_;
    bool wake_ DLOCK_GUARDED_BY(mutex_) = false;
    bool stopped_ DLOCK_GUARDED_BY(mutex_) = false;
    dlock::detail::engine_thread worker_;
};

}  // namespace dlock::etcd::detail
