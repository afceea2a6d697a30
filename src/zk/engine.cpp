#include "zk/engine.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <utility>

#include "core/acquire_policy.hpp"
#include "core/callbacks.hpp"
#include "core/status.hpp"
#include "core/token.hpp"
#include "core/validate.hpp"

namespace dlock::zk::detail {

using dlock::detail::fail;

namespace {

std::string ms_text(milliseconds d) { return std::to_string(d.count()) + "ms"; }

/// The request's outcome is unknown: the connection dropped; the session may come back.
bool retriable(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

/// The session (and its ephemeral nodes) is gone.
bool session_gone(int rc) {
    return rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING || rc == ZSESSIONMOVED;
}

errc code_for(int rc) {
    if (rc == ZNOAUTH || rc == ZAUTHFAILED) return errc::auth_failed;
    if (retriable(rc) || session_gone(rc)) return errc::connection_failed;
    return errc::server_error;
}

std::string zk_text(int rc) { return std::string(zerror(rc)) + " (" + std::to_string(rc) + ")"; }

int get_children(session& s, const std::string& path, std::vector<std::string>& out) {
    out.clear();
    // An answer proves nothing about the session's expiry at the leader (a follower answers
    // reads alone): no confirm() here or after any other request but the heartbeat.
    const int rc = s.with_handle([&](zhandle_t* zh) {
        String_vector children{0, nullptr};
        const int r = zoo_get_children(zh, path.c_str(), 0, &children);
        if (r == ZOK) {
            for (int i = 0; i < children.count; ++i) out.emplace_back(children.data[i]);
            deallocate_String_vector(&children);
        }
        return r;
    });
    return rc;
}

/// After a failed request: true to go round again (connection or session trouble), false when
/// the failure is final. An expired session is replaced at the top of the acquire loop; while the
/// C client has not yet reported a dropped connection, wait briefly for its state change instead
/// of spinning.
bool recoverable(session& s, int rc, const std::stop_token& cancel) {
    if (!retriable(rc) && !session_gone(rc)) return false;
    if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE) s.mark_dead();
    if (s.connected()) s.wait_change(std::chrono::milliseconds(100), cancel);
    return true;
}

}  // namespace

engine::engine(client_options options) : options_(std::move(options)) {
    const auto positive = [](milliseconds d, const char* field) {
        if (d <= milliseconds::zero()) {
            throw error(errc::invalid_argument,
                        std::string("client_options.") + field + " must be > 0, got " + ms_text(d));
        }
    };
    positive(options_.session_timeout, "session_timeout");
    positive(options_.connect_timeout, "connect_timeout");
    if (options_.session_timeout > milliseconds(std::numeric_limits<int>::max())) {
        throw error(errc::invalid_argument, "client_options.session_timeout " +
                                                ms_text(options_.session_timeout) +
                                                " is too large");
    }
    if (!options_.digest.empty() && options_.digest.find(':') == std::string::npos) {
        throw error(errc::invalid_argument,
                    "client_options.digest must be \"user:password\" (no ':' found)");
    }
    std::error_code ec;
    endpoint_ = parse_zk_url(options_.url, ec);
    dlock::detail::throw_if(ec);
}

engine::~engine() { stop(); }

void engine::start() {
    worker_.start([this](std::stop_token st) { run(st); });
}

void engine::stop() noexcept {
    // A forked child's copy: this thread and the C client's run only in the parent, and
    // closing a session would end the parent's (its ephemeral nodes are the parent's locks).
    // Keep everything, untouched, until the child exits.
    if (dlock::detail::kept_in_forked_child(*this, [this] { keep_after_fork(); })) return;
    worker_.stop([this] { wake(); });
    std::vector<std::shared_ptr<lease_core>> orphaned;
    std::vector<std::shared_ptr<session>> sessions;
    {
        dlock::detail::lock_guard lock(mutex_);
        for (auto& [ptr, e] : registry_) {
            if (auto l = e.lease.lock()) orphaned.push_back(std::move(l));
            e.node->deleted(mutex_) = true;
        }
        for (auto& [ptr, held] : sessions_) sessions.push_back(held.s);
        if (session_) sessions.push_back(std::move(session_));
        leases_.lose_all();
    }
    for (auto& l : orphaned) l->lose(make_error_code(errc::lock_lost), lost_reason::client_closed);
    for (auto& s : sessions) s->close();  // the nodes go with the session
}

// Not under mutex_: another thread of the parent may have held it at the fork, and that thread
// does not exist in the child. Nothing else runs on this engine here.
void engine::keep_after_fork() noexcept DLOCK_NO_THREAD_SAFETY_ANALYSIS {
    // Called from ~engine without an earlier stop(): keep what must not be destroyed.
    worker_.abandon();
    if (session_) dlock::detail::keep_forever(std::move(session_));
    for (auto& [ptr, e] : registry_) dlock::detail::keep_forever(e.node);
}

void engine::wake() noexcept {
    {
        dlock::detail::lock_guard lock(mutex_);
        wake_ = true;
    }
    worker_cv_.notify_all();
}

void engine::report_error(std::error_code ec, std::string_view what) noexcept {
    dlock::detail::report_to(options_.error_handler, ec, what);
}

void engine::notify(const lock_event& event) noexcept {
    dlock::detail::notify_observer(options_.observer, options_.error_handler, event);
}

std::string engine::lock_path(std::string_view name) const {
    return endpoint_.base + "/" + encode_name(name);
}

const ACL_vector* engine::acl() const noexcept {
    return options_.digest.empty() ? &ZOO_OPEN_ACL_UNSAFE : &ZOO_CREATOR_ALL_ACL;
}

int engine::ensure_path(session& s, const std::string& path, int mode) {
    // Create each missing component: the base as persistent nodes with an open ACL (a namespace),
    // the lock node itself as `mode`.
    std::size_t at = 1;
    while (at <= path.size()) {
        const auto next = std::min(path.find('/', at), path.size());
        const auto prefix = path.substr(0, next);
        const bool last = next == path.size();
        const int rc = s.with_handle([&](zhandle_t* zh) {
            return zoo_create(zh, prefix.c_str(), nullptr, -1, last ? acl() : &ZOO_OPEN_ACL_UNSAFE,
                              last ? mode : 0, nullptr, 0);
        });
        if (rc != ZOK && rc != ZNODEEXISTS) return rc;
        at = next + 1;
    }
    return ZOK;
}

std::shared_ptr<session> engine::session_for(std::error_code& ec) {
    dlock::detail::lock_guard connecting(connect_mutex_);
    std::shared_ptr<session> old;
    {
        dlock::detail::lock_guard lock(mutex_);
        if (session_ && !session_->dead() && !session_->stale(steady::now())) return session_;
        old = std::move(session_);
    }
    if (old) old->close();
    auto s = std::make_shared<session>([this] { wake(); });
    const auto deadline = dlock::detail::deadline_after(steady::now(), options_.connect_timeout);
    std::string why;
    if (!s->open(endpoint_.hosts, options_.session_timeout, deadline, why)) {
        fail(ec, errc::connection_failed,
             "ZooKeeper " + endpoint_.hosts + ": " + why + " (" +
                 ms_text(options_.connect_timeout) + ")");
        return nullptr;
    }
    if (!options_.digest.empty()) {
        const int rc = s->add_digest(options_.digest, deadline);
        if (rc != ZOK) {
            s->close();
            fail(ec, rc == ZOPERATIONTIMEOUT ? errc::connection_failed : errc::auth_failed,
                 "ZooKeeper " + endpoint_.hosts + ": addauth digest failed: " + zk_text(rc));
            return nullptr;
        }
    }
    if (!endpoint_.base.empty()) {
        const int rc = ensure_path(*s, endpoint_.base, 0);
        if (rc != ZOK) {
            s->close();
            fail(ec, code_for(rc),
                 "ZooKeeper " + endpoint_.hosts + ": cannot create base path " + endpoint_.base +
                     ": " + zk_text(rc));
            return nullptr;
        }
    }
    {
        dlock::detail::lock_guard lock(mutex_);
        session_ = s;
        wake_ = true;
    }
    // Heartbeats start now, not at the background thread's next round: until the first ones
    // settle, validity counts from the session's creation only.
    worker_cv_.notify_all();
    return s;
}

dlock::lease engine::grant(std::string_view name, lock_kind kind, const lock_options& options,
                           const std::shared_ptr<session>& s, std::string path, std::uint64_t czxid,
                           steady::time_point sent) {
    auto node = std::make_shared<held_node>();
    node->owner = s;
    node->path = std::move(path);
    node->czxid = czxid;
    // renew = false: a fixed lease of `lease` (docs/zookeeper.md, lock_options on ZooKeeper).
    auto cap = options.renew ? options.max_hold : std::min(options.max_hold, options.lease);
    if (cap != forever) node->cap_valid = dlock::detail::valid_until(sent, cap);
    const auto valid = std::min(s->valid_until(), node->cap_valid);
    auto core = std::make_shared<lease_core>(shared_from_this(), std::string(name), node->path,
                                             czxid, options, sent, valid, kind);
    const auto own_path = node->path;
    bool woken = false;
    {
        dlock::detail::lock_guard lock(mutex_);
        track(core, std::move(node), steady::now());
        // The background thread looks at this lease at its due time: wake it only when that is
        // before its own next look.
        woken = leases_.next_due() < worker_wakes_at_;
        wake_ = wake_ || woken;
    }
    if (woken) worker_cv_.notify_all();
    // A deletion by someone else makes the lease lost at once. After track(): a deletion reported
    // before the lease is tracked would find no lease to mark.
    s->own(own_path);
    notify({event_kind::acquired, name, czxid, {}, steady::now()});
    return dlock::detail::lease_access::make(std::move(core));
}

dlock::lease engine::reenter(std::string_view name, const lock_request& request,
                             const lock_options& options, std::error_code& ec) {
    auto* previous = dlock::detail::lease_access::core(*request.reenter);
    if (previous == nullptr) {
        dlock::detail::refuse_reentry(name, "an empty lease", ec);
        return {};
    }
    std::shared_ptr<lease_core> core;
    std::shared_ptr<held_node> node;
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto it = registry_.find(previous);
        // Only a re-entrant grant re-enters: a plain mutex's lease of the same name is not an
        // owner's level (one name serves one kind).
        if (it == registry_.end() || previous->name() != name ||
            previous->kind() != lock_kind::reentrant) {
            dlock::detail::refuse_reentry(
                name, "the lease is not a live reentrant grant of this lock on this client", ec);
            return {};
        }
        node = it->second.node;
        if (node->deleted(mutex_) || previous->state(steady::now()) == lock_state::lost) {
            fail(ec, errc::lock_lost,
                 "re-entering lock \"" + std::string(name) + "\": the grant was lost");
            return {};
        }
        ++node->depth(mutex_);
        core = std::make_shared<lease_core>(shared_from_this(), std::string(name), node->path,
                                            node->czxid, options, steady::now(),
                                            previous->valid_until(), lock_kind::reentrant);
        track(core, node, steady::now());
    }
    notify({event_kind::acquired, name, node->czxid, {}, steady::now()});
    return dlock::detail::lease_access::make(std::move(core));
}

dlock::lease engine::acquire_until(std::string_view name, const lock_request& request,
                                   const lock_options& options, steady::time_point deadline,
                                   std::error_code& ec) noexcept {
    ec.clear();
    const dlock::detail::acquire_call call(*this, name, ec);  // since/waited, gave_up
    return dlock::detail::guarded(ec, [&]() -> dlock::lease {
        if (!dlock::detail::check_acquire(name, max_name_length, request, options, ec)) return {};
        if (request.reenter != nullptr) return reenter(name, request, options, ec);
        const driver recipe(request.kind, request.count);
        return acquire(name, recipe, request.limit, options, deadline, ec);
    });
}

dlock::lease engine::acquire(std::string_view name, const driver& recipe, std::uint32_t limit,
                             const lock_options& options, steady::time_point deadline,
                             std::error_code& ec) {
    // The wait policy (cancel, max_attempts, deadline, wait_started, error events) is
    // acquire_policy's; this keeps the I/O: attempts, watches and the clean-up of our node.
    using dlock::detail::acquire_step;
    dlock::detail::acquire_policy policy(
        options, deadline, dlock::detail::acquire_policy::notification::watch_with_read);
    attempt_state a{recipe, name, recipe.quoted(name), limit, options, deadline};
    a.ours.parent = lock_path(name);
    a.ours.guid = dlock::detail::random_token();
    a.ours.prefix = recipe.prefix(a.ours.guid);
    for (auto step = policy.start();;) {
        if (step.event == event_kind::wait_started)
            notify({event_kind::wait_started, name, 0, {}, steady::now()});
        switch (step.what) {
            case acquire_step::action::attempt:
            case acquire_step::action::subscribe: {  // watch_with_read: never subscribe
                const auto report = attempt(a);
                step = policy.next(steady::now(), report);
                break;
            }
            case acquire_step::action::wait: {
                a.wait_rc = wait_turn(*a.s, a.ours, a.where, a.permits, step.until, options.cancel,
                                      a.vacated);
                if (a.vacated) a.sent = steady::now();  // the grant's start, if attempt takes it
                step = policy.woke();
                break;
            }
            case acquire_step::action::done: {
                if (a.where.wake_successor) {
                    // The node after ours may be watching us: a data change tells it we hold, so
                    // it becomes first in line and watches the children (docs/zookeeper.md,
                    // Semaphore). Retried until answered: a lost set would leave it asleep while
                    // permits are free (our session's end deletes the node, which wakes it too).
                    a.s->wake_successor(a.ours.path());
                }
                return grant(name, recipe.kind(), options, a.s, a.ours.path(), a.ours.czxid,
                             a.sent);
            }
            case acquire_step::action::give_up: {
                // Our node (or the guid whose create is in doubt) must not stay behind.
                if (a.s) {
                    if (a.ours.created()) a.s->disown(a.ours.path());  // wait_turn's prewatch
                    a.s->remove_guaranteed(a.ours);
                }
                // A failed attempt's own message, or the policy's reason to stop.
                std::string message = std::move(a.failure);
                if (message.empty() && !recipe.permits()) {
                    message = policy.give_up_message(step, a.quoted);
                } else if (message.empty() && step.error == errc::canceled) {
                    message = "waiting for " + a.quoted + " was canceled";
                } else if (message.empty() && step.error == errc::attempts_exhausted) {
                    message = a.quoted + " " + recipe.still() + " after " +
                              std::to_string(policy.attempts()) + " attempts";
                } else if (message.empty()) {
                    message = a.quoted + " " + recipe.busy();
                }
                fail(ec, step.error, std::move(message));
                if (step.event == event_kind::error)
                    notify({event_kind::error, name, 0, ec, steady::now()});
                return {};
            }
        }
    }
}

dlock::detail::attempt_report engine::attempt(attempt_state& a) {
    using dlock::detail::attempt_report;
    auto& s = a.s;
    auto& ours = a.ours;
    const auto& recipe = a.recipe;
    const auto& quoted = a.quoted;
    const auto& cancel = a.options.cancel;
    // A failure: its message goes with the give-up.
    const auto failed = [&](errc code, std::string message) {
        a.failure = std::move(message);
        return attempt_report::failed(make_error_code(code));
    };
    const auto recoverable = [&](int rc) { return zk::detail::recoverable(*s, rc, cancel); };
    if (const int rc = std::exchange(a.wait_rc, ZOK);
        rc != ZOK && rc != ZNONODE && !recoverable(rc)) {
        return failed(code_for(rc), quoted + ": watch: " + zk_text(rc));
    }
    // The only node ahead of ours went, and the session that delivered its deletion stayed
    // connected: ours holds with no getChildren (docs/zookeeper.md, "The recipe", step 4).
    // Sequence numbers only grow, so no node is ever placed before ours; not after a create in
    // doubt (a late duplicate of ours must be found and deleted by a getChildren) and not when
    // the session died meanwhile.
    if (std::exchange(a.vacated, false) && a.ours.created() && !a.ours.doubted && s && !s->dead() &&
        !s->stale(steady::now()) && !cancel.stop_requested()) {
        a.where.holds = true;
        return attempt_report::granted();
    }
    // Connection and session trouble is retried here, within the attempt, until it is answered;
    // cancel and the deadline still bound it.
    for (;;) {
        if (cancel.stop_requested())
            return failed(errc::canceled, "waiting for " + quoted + " was canceled");
        if (s && s->stale(steady::now())) s->mark_dead();
        if (!s || s->dead()) {
            // A dead session took our node with it: start over on a new one (not yet granted).
            ours.forget();
            std::error_code sec;
            s = session_for(sec);
            if (!s) {
                a.failure = dlock::detail::message_for(sec);
                return attempt_report::failed(sec);
            }
        }
        // Disconnected: wait for the session to come back, but not past the point where it can no
        // longer be trusted (the server may expire it from then on, and with the whole ensemble
        // down nobody would tell us): then start over on a new session, which fails with
        // connection_failed within connect_timeout if the ensemble is still unreachable.
        if (!s->connected() && !s->wait_connected(std::min(a.deadline, s->valid_until()), cancel)) {
            if (s->dead()) continue;
            if (cancel.stop_requested())
                return failed(errc::canceled, "waiting for " + quoted + " was canceled");
            if (steady::now() < a.deadline && !s->connected()) {
                s->mark_dead();
                continue;
            }
            return failed(errc::connection_failed, "ZooKeeper " + endpoint_.hosts +
                                                       ": disconnected while acquiring " + quoted +
                                                       " and not back before the deadline");
        }
        if (recipe.permits()) {
            // Also (re-)creates the semaphore's persistent parent.
            if (const int rc = read_limit(*s, ours.parent, a.limit, a.permits); rc != ZOK) {
                if (recoverable(rc)) continue;
                return failed(code_for(rc), quoted + ": reading its permits: " + zk_text(rc));
            }
            if (a.permits != a.limit && !a.permits_reported) {
                a.permits_reported = true;
                report_error(make_error_code(errc::invalid_argument),
                             dlock::detail::permits_mismatch(quoted, a.permits, a.limit));
            }
        }
        // A fresh create takes the listing along: one wait for both answers, not two.
        a.sent = steady::now();
        children_listing listing;
        if (const int rc = s->create_protected(ours, acl(), &listing); rc != ZOK) {
            if (rc == ZNONODE) {
                // A lock's container parent went once empty (a semaphore's is made again by
                // read_limit next round).
                const int prc =
                    recipe.permits() ? ZOK : ensure_path(*s, ours.parent, ZOO_CONTAINER);
                if (prc == ZOK || recoverable(prc)) continue;
                return failed(code_for(prc),
                              quoted + ": cannot create " + ours.parent + ": " + zk_text(prc));
            }
            if (recoverable(rc)) continue;
            return failed(code_for(rc), quoted + ": create: " + zk_text(rc));
        }
        if (listing.sent) {
            a.children = std::move(listing.children);
        } else {
            a.sent = steady::now();
            listing.rc = get_children(*s, ours.parent, a.children);
        }
        if (const int rc = listing.rc; rc != ZOK) {
            if (recoverable(rc)) continue;
            if (rc == ZNONODE) {  // the container went with our node: start over
                ours.forget();
                continue;
            }
            return failed(code_for(rc), quoted + ": getChildren: " + zk_text(rc));
        }
        // A duplicate of ours (a create we believed lost that landed after all, seen late after a
        // reconnection) would queue us behind ourselves: delete it and look again.
        bool duplicate = false;
        for (const auto& c : a.children) {
            if (c == ours.name || !c.starts_with(ours.guid)) continue;
            s->remove_guaranteed(ours.parent + "/" + c);
            duplicate = true;
        }
        if (duplicate) continue;
        // One name, one kind (backend.hpp): another kind's nodes are not part of this queue.
        if (std::any_of(a.children.begin(), a.children.end(),
                        [&](const std::string& c) { return recipe.foreign(c); })) {
            return failed(errc::unexpected_reply, quoted + " is used as a " + recipe.other_kind() +
                                                      "; a name serves one kind");
        }
        a.where = recipe.locate(a.children, ours.name, a.permits);
        if (!a.where.found) {  // our node is gone (session expired, or deleted by someone)
            ours.forget();
            continue;
        }
        return a.where.holds ? attempt_report::granted() : attempt_report::contended();
    }
}

int engine::wait_turn(session& s, const protected_node& ours, standing& where,
                      std::uint64_t permits, steady::time_point deadline,
                      const std::stop_token& cancel, bool& vacated) {
    vacated = false;
    // Watch only what decides our turn (no herd): the node we wait for (deleted; for a
    // semaphore, also set once it holds), or, first in a semaphore's line, the children (a
    // release) and the parent's data (set_permits). ZNONODE: the node went between getChildren
    // and the watch, so look again at once.
    const auto watched = where.watch_parent ? ours.parent : ours.parent + "/" + where.watch;
    const auto seen = s.watch_begin(watched);
    // Our own node's watch (a holder's, session::own) goes out now, off the hand-off that grants
    // us: asynchronous, ahead of the watch below.
    s.prewatch(ours.path());
    int rc = ZOK;
    bool changed = false;  // seen when setting the watch: look again instead of waiting
    if (where.watch_parent) {
        rc = s.with_handle([&](zhandle_t* zh) {
            String_vector kids{0, nullptr};
            int r = zoo_wget_children(zh, watched.c_str(), &session::on_event, &s, &kids);
            if (r != ZOK) return r;
            std::vector<std::string> now(kids.data, kids.data + kids.count);
            deallocate_String_vector(&kids);
            changed = locate_permits(now, ours.name, permits).holds;
            char data[32];
            int size = sizeof data;
            r = zoo_wget(zh, watched.c_str(), &session::on_event, &s, data, &size, nullptr);
            if (r == ZOK && std::string_view(data, std::max(size, 0)) != std::to_string(permits))
                changed = true;
            return r;
        });
    } else {
        Stat stat{};
        rc = s.with_handle([&](zhandle_t* zh) { return s.watch_node(zh, watched, &stat); });
        // A semaphore node with data holds already: we are first in line now. (Lock nodes carry
        // no data.)
        changed = rc == ZOK && is_permit_node(where.watch) && stat.dataLength > 0;
    }
    // A watch fires only for changes after it was set: what changed since our getChildren was
    // read back above.
    if (rc == ZOK && !changed) vacated = wait_for(s, ours, where, watched, seen, deadline, cancel);
    s.watch_end(watched);
    return rc;
}

bool engine::wait_for(session& s, const protected_node& ours, standing& where,
                      const std::string& watched, std::uint64_t seen, steady::time_point deadline,
                      const std::stop_token& cancel) {
    if (where.watch_parent) {  // the semaphore's first waiter: a release or set_permits
        s.watch_wait(watched, seen, deadline, cancel);
        return false;
    }
    // Further back in the line, the node before the one we watch is watched too: once it goes,
    // we look again while the one we watch is still there, so that its going later grants ours
    // with nothing more to read (docs/zookeeper.md, "The recipe", step 5). Our watch on `watched`
    // stays set throughout: nothing it reports is missed.
    for (;;) {
        std::string refresh;
        std::uint64_t refresh_seen = 0;
        if (!where.refresh.empty()) {  // its answer is not waited for: gone or failed, it fires
            refresh = ours.parent + "/" + where.refresh;
            refresh_seen = s.watch_begin(refresh);
            s.watch_probe(refresh);
        }
        const auto woke = s.watch_wait(watched, seen, refresh.empty() ? nullptr : &refresh,
                                       refresh_seen, deadline, cancel);
        if (!refresh.empty()) s.watch_end(refresh);
        if (woke == session::woken::deleted) return where.watch_is_last;
        if (woke == session::woken::other) return false;
        // Look again. Any other answer than "the same node ahead of ours" ends the wait and the
        // attempt reads again; our node first in line holds (the listing was read after our
        // create and while the session stayed connected).
        std::vector<std::string> children;
        if (get_children(s, ours.parent, children) != ZOK) return false;
        const auto now = detail::locate(children, ours.name);
        if (!now.found) return false;
        if (now.holds) return !ours.doubted;
        if (now.watch != where.watch) return false;
        where.watch_is_last = now.watch_is_last;
        where.refresh = now.refresh;
    }
}

int engine::read_limit(session& s, const std::string& parent, std::uint32_t limit,
                       std::uint64_t& out) {
    const auto wanted = std::to_string(limit);
    for (int round = 0; round < 3; ++round) {
        char data[32];
        int size = sizeof data - 1;
        Stat stat{};
        int rc = s.with_handle(
            [&](zhandle_t* zh) { return zoo_get(zh, parent.c_str(), 0, data, &size, &stat); });
        if (rc == ZNONODE) {
            // The semaphore's node is persistent (a container would take its number of permits
            // with it once empty): the base first, then the node with its permits as data.
            rc = ensure_path(s, endpoint_.base.empty() ? std::string("/") : endpoint_.base, 0);
            if (rc != ZOK && !endpoint_.base.empty()) return rc;
            rc = s.with_handle([&](zhandle_t* zh) {
                return zoo_create(zh, parent.c_str(), wanted.data(),
                                  static_cast<int>(wanted.size()), acl(), 0, nullptr, 0);
            });
            if (rc != ZOK && rc != ZNODEEXISTS) return rc;
            continue;
        }
        if (rc != ZOK) return rc;
        std::uint64_t value = 0;
        const auto [end, err] = std::from_chars(data, data + std::max(size, 0), value);
        if (size > 0 && err == std::errc() && end == data + size && value >= 1) {
            out = value;
            return ZOK;
        }
        // No number yet (the node was made by another kind, or by hand): set ours, once.
        rc = s.with_handle([&](zhandle_t* zh) {
            return zoo_set(zh, parent.c_str(), wanted.data(), static_cast<int>(wanted.size()),
                           stat.version);
        });
        if (rc != ZOK && rc != ZBADVERSION) return rc;
    }
    return ZBADARGUMENTS;
}

void engine::set_permits(std::string_view name, std::uint32_t permits,
                         std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return;
        if (permits < 1) {
            return fail(ec, errc::invalid_argument,
                        "set_permits(\"" + std::string(name) + "\"): permits must be >= 1, got 0");
        }
        auto s = session_for(ec);
        if (!s) return;
        const auto parent = lock_path(name);
        std::uint64_t current = 0;
        int rc = read_limit(*s, parent, permits, current);
        if (rc == ZOK && current != permits) {
            const auto text = std::to_string(permits);
            rc = s->with_handle([&](zhandle_t* zh) {
                return zoo_set(zh, parent.c_str(), text.data(), static_cast<int>(text.size()), -1);
            });
        }
        if (rc != ZOK) {
            fail(ec, code_for(rc),
                 "set_permits(\"" + std::string(name) + "\"): " + parent + ": " + zk_text(rc));
        }
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    }
}

std::string engine::record_path(std::string_view name) const { return lock_path(name) + "%record"; }

std::string engine::record_once(std::string_view name, std::string_view value,
                                std::error_code& ec) noexcept {
    ec.clear();
    try {
        const auto quoted = "record_once(\"" + std::string(name) + "\")";
        dlock::detail::validate_record(name, value, max_name_length, quoted, ec);
        if (ec) return {};
        auto s = session_for(ec);
        if (!s) return {};
        const auto path = record_path(name);
        int rc = ZOK;
        // Three rounds at most: the base may be missing (created, then retried), and an operator
        // may delete the node between our create and our read.
        for (int round = 0; round < 3; ++round) {
            rc = s->with_handle([&](zhandle_t* zh) {
                return zoo_create(zh, path.c_str(), value.data(), static_cast<int>(value.size()),
                                  acl(), 0, nullptr, 0);
            });
            if (rc == ZOK) return std::string(value);
            if (rc == ZNONODE) {
                rc = ensure_path(*s, endpoint_.base.empty() ? std::string("/") : endpoint_.base, 0);
                if (rc != ZOK && !endpoint_.base.empty()) break;
                continue;
            }
            if (rc != ZNODEEXISTS) break;
            std::string data(max_record_size + 1, '\0');
            int size = static_cast<int>(data.size());
            Stat stat{};
            rc = s->with_handle([&](zhandle_t* zh) {
                return zoo_get(zh, path.c_str(), 0, data.data(), &size, &stat);
            });
            if (rc == ZNONODE) continue;
            if (rc != ZOK) break;
            if (size <= 0 || static_cast<std::size_t>(size) > max_record_size) {
                fail(ec, errc::unexpected_reply,
                     quoted + ": " + path + " holds " + std::to_string(std::max(size, 0)) +
                         " bytes, not a record of 1 to " + std::to_string(max_record_size));
                return {};
            }
            data.resize(static_cast<std::size_t>(size));
            return data;
        }
        fail(ec, rc == ZOK ? errc::unexpected_reply : code_for(rc),
             quoted + ": " + path + ": " + zk_text(rc));
        return {};
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return {};
    }
}

void engine::release(lease_core& lease, std::error_code& ec) noexcept {
    ec.clear();
    std::shared_ptr<held_node> node;
    bool last = false;
    bool stays = false;  // another re-entry level still holds the node
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto it = registry_.find(&lease);
        if (it != registry_.end()) {
            node = it->second.node;
            untrack(&lease);
            last = --node->depth(mutex_) == 0 && !node->deleted(mutex_);
            if (last) node->deleted(mutex_) = true;
            // Decided here: read after the unlock, a concurrent release of the other level (or a
            // loss) could make this level's clean release look like a lost one.
            stays = node->depth(mutex_) > 0 && !node->deleted(mutex_);
        }
    }
    lease.mark_released();
    try {
        if (!node) {
            return fail(ec, errc::lock_lost,
                        "lock \"" + lease.name() + "\": the client was closed; nothing to release");
        }
        if (stays) {  // one re-entry level left; the node stays
            return;   // dlock::lease reports the released event
        }
        if (!last) {
            return fail(ec, errc::lock_lost,
                        "lock \"" + lease.name() + "\" was lost before it was released");
        }
        node->owner->disown(node->path);  // our own delete is no loss
        const int rc = node->owner->remove_guaranteed(node->path);
        if (rc == ZOK) return;  // dlock::lease reports the released event
        if (rc == ZNONODE || session_gone(rc)) {
            lease.note_loss(rc == ZNONODE ? lost_reason::deleted : lost_reason::session_expired);
            fail(ec, errc::lock_lost,
                 "lock \"" + lease.name() + "\": our node " + node->path +
                     " was already gone (session expired)");
        } else {
            // Unknown outcome: remove_guaranteed deletes it once reconnected (or it goes with the
            // session).
            fail(ec, code_for(rc),
                 "release of \"" + lease.name() + "\": delete " + node->path + ": " + zk_text(rc) +
                     "; retried once reconnected, or it goes with the session");
        }
        notify({event_kind::error, lease.name(), lease.fencing_token(), ec, steady::now()});
    } catch (...) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "release: out of memory");
    }
}

void engine::track(const std::shared_ptr<lease_core>& core, std::shared_ptr<held_node> node,
                   steady::time_point now) {
    auto& held = sessions_[node->owner.get()];
    if (!held.s) {
        held.s = node->owner;
        held.healthy = held.s->connected() && !held.s->overdue(now);
    }
    held.leases.insert(core.get());
    registry_[core.get()] = {core, std::move(node)};
    leases_.track(core, revisit_at(now, core->valid_until()));
}

void engine::untrack(lease_core* core) noexcept {
    const auto it = registry_.find(core);
    if (it == registry_.end()) return;
    const auto held = sessions_.find(it->second.node->owner.get());
    if (held != sessions_.end()) {
        held->second.leases.erase(core);
        if (held->second.leases.empty()) sessions_.erase(held);
    }
    leases_.untrack(core);
    registry_.erase(it);
}

steady::time_point engine::revisit_at(steady::time_point now, steady::time_point bound) {
    // Half the validity left: a background thread late by less than that loses nothing.
    return bound <= now ? now : now + (bound - now) / 2;
}

steady::time_point engine::check_leases(steady::time_point now) {
    std::vector<std::pair<std::shared_ptr<lease_core>, lost_reason>> lost;
    std::vector<std::shared_ptr<lease_core>> went_uncertain;  // reported outside mutex_
    std::vector<std::pair<std::shared_ptr<session>, std::string>> doomed;  // nodes to delete
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto lose = [&](const std::shared_ptr<lease_core>& lease, held_node& node,
                              bool delete_node, lost_reason reason) DLOCK_REQUIRES(mutex_) {
            if (delete_node && !node.deleted(mutex_)) doomed.emplace_back(node.owner, node.path);
            node.deleted(mutex_) = true;
            leases_.untrack(lease.get());
            lost.emplace_back(lease, reason);
        };
        // Why a lease whose bound passed is lost: max_hold ran out (or, renew = false, the fixed
        // lease did), or else no answer from ZooKeeper within the session timeout.
        const auto ran_out = [&](const lease_core& lease, const held_node& node) {
            if (now < node.cap_valid) return lost_reason::expired;
            const auto& plan = lease.plan();
            return plan.renew || plan.max_hold <= plan.lease ? lost_reason::max_hold
                                                             : lost_reason::expired;
        };
        // Events, per session holding leases (O(sessions) when nothing happened): nodes someone
        // else deleted (session::own's watches), an expired session, and a change of health
        // (connected and heartbeats answered) that makes its leases held or uncertain at once.
        for (auto& [ptr, held] : sessions_) {
            auto& s = *held.s;
            const auto vanished = s.take_vanished();
            const bool dead = s.dead();
            const bool healthy = s.connected() && !s.overdue(now);
            if (vanished.empty() && dead == held.dead && healthy == held.healthy) continue;
            held.healthy = healthy;
            held.dead = dead;
            for (auto* key : held.leases) {
                const auto& e = registry_.at(key);
                auto lease = e.lease.lock();
                if (!lease || lease->released() || lease->lost_token().stop_requested()) continue;
                auto& node = *e.node;
                // Gone already: deleted by someone else, or with the session.
                if (std::find(vanished.begin(), vanished.end(), node.path) != vanished.end()) {
                    lose(lease, node, false, lost_reason::deleted);
                    continue;
                }
                if (dead) {
                    lose(lease, node, false, lost_reason::session_expired);
                    continue;
                }
                const auto bound = std::min(s.valid_until(), node.cap_valid);
                if (now >= bound) continue;  // lost below, when the registry finds it due
                lease->renewed(bound);
                if (!healthy && lease->renewal_failed()) went_uncertain.push_back(lease);
            }
        }
        // Time: the leases due for a look (renewal from the session's bound, max_hold, expiry),
        // out of the due-time heap: O(k log n) for k due.
        auto batch = leases_.due(now);
        for (auto& lease : batch.lost) {
            // Past its validity: the server may expire the session from now on (or max_hold ran
            // out). If we reconnect in time the node is deleted, as nobody trusts it any more.
            const auto it = registry_.find(lease.get());
            if (it == registry_.end() || lease->lost_token().stop_requested()) continue;
            lose(lease, *it->second.node, true, ran_out(*lease, *it->second.node));
        }
        for (auto& due : batch.renew) {
            auto& lease = due.lease;
            const auto it = registry_.find(lease.get());
            if (it == registry_.end() || lease->lost_token().stop_requested()) {
                leases_.untrack(lease.get());
                continue;
            }
            auto& node = *it->second.node;
            auto& s = *node.owner;
            if (s.dead()) {
                lose(lease, node, false, lost_reason::session_expired);
                continue;
            }
            const auto bound = std::min(s.valid_until(), node.cap_valid);
            if (now >= bound) {
                lose(lease, node, true, ran_out(*lease, node));
                continue;
            }
            if (s.connected() && !s.overdue(now)) {
                lease->renewed(bound);
            } else {
                if (lease->renewal_failed()) went_uncertain.push_back(lease);
            }
            leases_.schedule(lease.get(), revisit_at(now, bound), true);
        }
    }
    // Outside mutex_: queue_cleanup wakes this thread, which takes mutex_.
    for (auto& [s, path] : doomed) s->queue_cleanup({{}, {}, path});
    // The observer and on_lost hear why through the lost event (as with Redis, no error report).
    for (auto& lease : went_uncertain) lease->report_renewal_failed();
    for (auto& [lease, reason] : lost) lease->lose(make_error_code(errc::lock_lost), reason);
    dlock::detail::lock_guard lock(mutex_);
    return leases_.next_due();
}

void engine::run(std::stop_token stop) {
    while (!stop.stop_requested()) {
        const auto now = steady::now();
        auto next = check_leases(now);
        std::vector<std::shared_ptr<session>> sessions;
        {
            dlock::detail::lock_guard lock(mutex_);
            if (session_) sessions.push_back(session_);
            for (const auto& [ptr, held] : sessions_) {
                if (held.s != session_) sessions.push_back(held.s);
            }
        }
        for (auto& s : sessions) {
            if (s->dead()) continue;
            next = std::min(next, s->heartbeat(now));
            s->run_cleanup();
        }
        sessions.clear();
        dlock::detail::unique_lock lock(mutex_);
        const auto until = std::min(next, now + std::chrono::seconds(1));
        worker_wakes_at_ = wake_ ? steady::time_point::min() : until;
        // The predicate runs inside the wait, with mutex_ held: the analysis cannot see that.
        worker_cv_.wait_until(lock, stop, until,
                              [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS { return wake_; });
        wake_ = false;
        worker_wakes_at_ = steady::time_point::min();
    }
}

}  // namespace dlock::zk::detail
