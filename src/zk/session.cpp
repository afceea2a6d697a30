#include "zk/session.hpp"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "core/renewal.hpp"

namespace dlock::zk::detail {

// A cleanup request in flight. Owned by its session (in_flight_), not by its completion: the C
// client does not call every pending completion when a handle is closed while its server is
// unresponsive (seen under LeakSanitizer), so the session frees what is left when it goes.
struct cleanup_op {
    session* owner;
    cleanup_item item;
};

// A watch (re-)arm or a successor wake in flight; owned by its session like cleanup_op.
struct node_op {
    session* owner;
    int kind;  // session::node_request
    std::string path;
};

namespace {

bool retriable(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

// The C client logs every connect, close and retry at INFO to stderr. Our errors carry what
// matters, so its log is dropped unless DLOCK_ZK_LOG=1 (then: stderr, as the C client would).
void client_log(const char* message) {
    static const bool enabled = [] {
        // Read once; dlock never sets environment variables, so no setenv() can race it.
        const char* env = std::getenv("DLOCK_ZK_LOG");  // NOLINT(concurrency-mt-unsafe)
        return env != nullptr && std::string_view(env) == "1";
    }();
    if (enabled) std::fprintf(stderr, "%s\n", message);
}

// Wait bounds: a far deadline (forever) is cut so time arithmetic in the library cannot overflow;
// callers loop.
steady::time_point bounded(steady::time_point deadline) {
    return std::min(deadline, dlock::detail::deadline_after(steady::now(), std::chrono::hours(1)));
}

}  // namespace

session::session(std::function<void()> wake) : wake_(std::move(wake)) {}

session::~session() { close(); }

void session::close() noexcept {
    zhandle_t* zh = nullptr;
    {
        dlock::detail::exclusive_lock lock(handle_mutex_);
        zh = std::exchange(zh_, nullptr);
        if (zh != nullptr) zookeeper_close(zh);  // joins the C client's threads
    }
    if (zh == nullptr) return;
    dlock::detail::lock_guard lock(mutex_);
    dead_ = true;
    ++state_gen_;
    cleanup_.clear();
    node_requests_.clear();
    changed_.notify_all();
}

bool session::open(const std::string& hosts, milliseconds timeout, steady::time_point deadline,
                   std::string& why) {
    const auto sent = steady::now();
    {
        dlock::detail::exclusive_lock lock(handle_mutex_);
        errno = 0;
        zh_ = zookeeper_init2(hosts.c_str(), &session::on_event, static_cast<int>(timeout.count()),
                              nullptr, this, 0, &client_log);
        if (zh_ == nullptr) {
            why = std::string("zookeeper_init failed: ") +
                  (errno != 0 ? std::system_category().message(errno) : "bad host list");
            return false;
        }
        // By default the C client re-resolves the host list with getaddrinfo() every time it
        // polls its socket. Besides the needless work, a fork() while its I/O thread is inside
        // getaddrinfo() copies a held glibc lock into the child, whose first getaddrinfo() (its
        // own new client) then blocks forever. Resolve again only after a connection loss.
        zoo_set_servers_resolution_delay(zh_, -1);
    }
    if (!wait_connected(deadline, {})) {
        why = "no session established within the connect timeout";
        close();
        return false;
    }
    timeout_ = milliseconds(with_handle([](zhandle_t* zh) { return zoo_recv_timeout(zh); }));
    // The leader itself registered the new session, with an expiry >= its registration time
    // + timeout, and registration came after `sent`.
    confirm(sent);
    return true;
}

int session::add_digest(const std::string& digest, steady::time_point deadline) {
    const int rc = with_handle([&](zhandle_t* zh) {
        return zoo_add_auth(
            zh, "digest", digest.data(), static_cast<int>(digest.size()),
            [](int result, const void* data) {
                auto* self = static_cast<session*>(const_cast<void*>(data));
                dlock::detail::lock_guard lock(self->mutex_);
                self->auth_rc_ = result;
                self->changed_.notify_all();
            },
            this);
    });
    if (rc != ZOK) return rc;
    dlock::detail::unique_lock lock(mutex_);
    // changed_'s predicates (here and below) run inside the wait, with mutex_ held: the
    // analysis cannot see that.
    if (!changed_.wait_until(lock, deadline, [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS {
            return auth_rc_ != 1 || dead_;
        }))
        return ZOPERATIONTIMEOUT;
    return dead_ && auth_rc_ == 1 ? ZAUTHFAILED : auth_rc_;
}

bool session::connected() const {
    dlock::detail::lock_guard lock(mutex_);
    return !dead_ && state_ == ZOO_CONNECTED_STATE;
}

bool session::dead() const {
    dlock::detail::lock_guard lock(mutex_);
    return dead_;
}

void session::confirm(steady::time_point touched) noexcept {
    const auto wanted = touched.time_since_epoch().count();
    auto current = answered_sent_.load();
    while (current < wanted && !answered_sent_.compare_exchange_weak(current, wanted)) {
    }
}

steady::time_point session::valid_until() const noexcept {
    const steady::time_point sent{steady::duration(answered_sent_.load())};
    return dlock::detail::valid_until(sent, timeout_);
}

bool session::overdue(steady::time_point now) const noexcept {
    if (!heartbeat_in_flight_.load()) return false;
    const steady::time_point sent{steady::duration(heartbeat_sent_.load())};
    return now - sent > 2 * heartbeat_period();
}

milliseconds session::heartbeat_period() const noexcept {
    return std::max(timeout_ / 20, milliseconds(10));
}

void session::settle(steady::time_point sent, steady::time_point answered) {
    // Heartbeat i (sent s_i, answered a_i) made our server record a touch of the session at
    // some time >= s_i. The server reports its touches to the leader with each reply to the
    // leader's ping (every tickTime / 2), over the same FIFO connection on which it forwards our
    // syncs. If heartbeat j was sent at s_j >= a_i + settle_period, a ping came in between, so
    // the report carrying touch i left before sync j was forwarded; sync j's answer means the
    // leader received that forward, hence the report: the leader has touched the session at a
    // time >= s_i and cannot expire it before s_i + timeout.
    std::optional<steady::time_point> proven;
    {
        dlock::detail::lock_guard lock(settle_mutex_);
        while (!answered_.empty() && answered_.front().answered + settle_period() <= sent) {
            proven = answered_.front().sent;
            answered_.pop_front();
        }
        answered_.push_back({sent, answered});
    }
    if (proven) confirm(*proven);
}

void session::mark_dead() noexcept {
    {
        dlock::detail::lock_guard lock(mutex_);
        if (dead_) return;
        dead_ = true;
        ++state_gen_;
        cleanup_.clear();
        changed_.notify_all();
    }
    if (wake_) wake_();
}

void session::wait_change(milliseconds bound, const std::stop_token& cancel) {
    dlock::detail::unique_lock lock(mutex_);
    const auto gen = state_gen_;
    std::stop_token token = cancel;
    changed_.wait_for(lock, token, bound,
                      [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS { return dead_ || state_gen_ != gen; });
}

bool session::wait_connected(steady::time_point deadline, const std::stop_token& cancel) {
    dlock::detail::unique_lock lock(mutex_);
    for (;;) {
        if (dead_) return false;
        if (state_ == ZOO_CONNECTED_STATE) return true;
        if (steady::now() >= deadline || cancel.stop_requested()) return false;
        std::stop_token token = cancel;
        changed_.wait_until(lock, token, bounded(deadline), [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS {
            return dead_ || state_ == ZOO_CONNECTED_STATE;
        });
    }
}

std::uint64_t session::watch_begin(const std::string& path) {
    dlock::detail::lock_guard lock(mutex_);
    auto& w = watches_[path];
    ++w.waiters;
    return w.fired;
}

bool session::watch_wait(const std::string& path, std::uint64_t seen, steady::time_point deadline,
                         const std::stop_token& cancel) {
    return watch_wait(path, seen, nullptr, 0, deadline, cancel) == woken::deleted;
}

session::woken session::watch_wait(const std::string& path, std::uint64_t seen,
                                   const std::string* also, std::uint64_t also_seen,
                                   steady::time_point deadline, const std::stop_token& cancel) {
    dlock::detail::unique_lock lock(mutex_);
    const auto gen = state_gen_;
    // The watch on `p` if it fired since `before`.
    const auto fired = [&](const std::string* p, std::uint64_t before)
                           DLOCK_NO_THREAD_SAFETY_ANALYSIS -> const watch* {
        if (p == nullptr) return nullptr;
        const auto it = watches_.find(*p);
        return it != watches_.end() && it->second.fired != before ? &it->second : nullptr;
    };
    std::stop_token token = cancel;
    changed_.wait_until(lock, token, bounded(deadline), [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS {
        return dead_ || state_gen_ != gen || fired(&path, seen) || fired(also, also_seen);
    });
    // state_ changes only with state_gen_: connected now with the same generation is connected
    // throughout.
    if (dead_ || state_gen_ != gen || state_ != ZOO_CONNECTED_STATE) return woken::other;
    if (const auto* w = fired(&path, seen)) return w->deleted ? woken::deleted : woken::other;
    return fired(also, also_seen) ? woken::also : woken::other;
}

void session::watch_end(const std::string& path) {
    dlock::detail::lock_guard lock(mutex_);
    const auto it = watches_.find(path);
    if (it != watches_.end() && --it->second.waiters <= 0) watches_.erase(it);
}

void session::on_event(zhandle_t*, int type, int state, const char* path, void* ctx) {
    auto* self = static_cast<session*>(ctx);
    bool state_change = false;
    {
        dlock::detail::lock_guard lock(self->mutex_);
        if (type == ZOO_SESSION_EVENT) {
            self->state_ = state;
            if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
                self->dead_ = true;
                self->cleanup_.clear();  // the session's ephemeral nodes go with it
            }
            ++self->state_gen_;
            state_change = true;
        } else if (path != nullptr) {
            // Deleted, changed, or the watch was dropped: the waiter looks again either way.
            self->fire_locked(path, type == ZOO_DELETED_EVENT);
            const auto held = self->owned_.find(path);
            if (held != self->owned_.end()) {
                if (type == ZOO_DELETED_EVENT) {
                    self->vanished_.emplace_back(path);
                    self->owned_.erase(held);
                } else {
                    // A data change (an administrator's set) or a dropped watch used up the
                    // one-shot watch: the background thread sets it again (never from here:
                    // close() joins this thread while holding the handle).
                    self->node_requests_.emplace_back(node_request::watch, path);
                }
                state_change = true;  // wake the background thread
            }
        }
        self->changed_.notify_all();
    }
    if (state_change && self->wake_) self->wake_();
}

void session::on_heartbeat(int rc, const char*, const void* data) {
    auto* self = static_cast<session*>(const_cast<void*>(data));
    if (rc == ZOK)
        self->settle(steady::time_point(steady::duration(self->heartbeat_sent_.load())),
                     steady::now());
    self->heartbeat_in_flight_.store(false);
    if (rc != ZCLOSING && self->wake_) self->wake_();
}

steady::time_point session::heartbeat(steady::time_point now) {
    const auto period = heartbeat_period();
    if (heartbeat_in_flight_.load() || !connected()) return now + period;
    if (now < next_heartbeat_) return next_heartbeat_;
    heartbeat_in_flight_.store(true);
    heartbeat_sent_.store(steady::now().time_since_epoch().count());
    // sync is forwarded to the leader and answered through it (docs/zookeeper.md); it proves a
    // touch only once settled (settle()).
    const int rc = with_handle(
        [&](zhandle_t* zh) { return zoo_async(zh, "/", &session::on_heartbeat, this); });
    if (rc != ZOK) heartbeat_in_flight_.store(false);
    next_heartbeat_ = now + period;
    return next_heartbeat_;
}

void session::own(const std::string& path) {
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto [it, added] = owned_.try_emplace(path, 0);
        ++it->second;
        if (!added) return;  // a re-entry level, or watched since our wait: watched already
    }
    send(node_request::watch, path);  // asynchronous: a grant does not wait for it
}

void session::prewatch(const std::string& path) {
    {
        dlock::detail::lock_guard lock(mutex_);
        if (!owned_.try_emplace(path, 0).second) return;
    }
    send(node_request::watch, path);
}

void session::wake_successor(const std::string& path) { send(node_request::wake, path); }

void session::send(node_request kind, const std::string& path) {
    // Registered before it goes out: the completion runs on the C client's thread and may run
    // before zoo_a*() returns (a connection closed at once), and it must find the request to
    // retry it. Found missing, a dropped wake-up was never resent and its waiter slept.
    auto* const op = track(std::make_unique<node_op>(node_op{this, static_cast<int>(kind), path}));
    const int rc = with_handle([&](zhandle_t* zh) {
        if (kind == node_request::wake)
            return zoo_aset(zh, op->path.c_str(), "1", 1, -1, &session::on_wake_set, op);
        return zoo_awget(  // getData, not exists: see watch_node
            zh, op->path.c_str(), &session::on_event, this,
            kind == node_request::watch ? &session::on_watch_read : &session::on_probe_read, op);
    });
    if (rc == ZOK) return;  // until its completion runs (or we go)
    finish(op);             // not sent: no completion will run
    if (kind == node_request::probe) {
        probe_failed(path, rc);
    } else if (retriable(rc) || rc == ZINVALIDSTATE) {
        resend(kind, path);
    }
}

int session::watch_node(zhandle_t* zh, const std::string& path, Stat* stat) {
    char data[1];  // not wanted: lock nodes carry none, a semaphore node's length is in `stat`
    int len = sizeof data;
    return zoo_wget(zh, path.c_str(), &session::on_event, this, data, &len, stat);
}

void session::watch_probe(const std::string& path) { send(node_request::probe, path); }

void session::probe_failed(const std::string& path, int rc) {
    dlock::detail::lock_guard lock(mutex_);
    fire_locked(path, rc == ZNONODE);
    changed_.notify_all();
}

void session::fire_locked(const std::string& path, bool deleted) {
    const auto it = watches_.find(path);
    if (it == watches_.end()) return;  // nobody waits on it (any more)
    ++it->second.fired;
    if (deleted) it->second.deleted = true;
}

void session::resend(node_request kind, std::string path) {
    dlock::detail::lock_guard lock(mutex_);
    if (dead_) return;
    if (kind == node_request::watch && owned_.find(path) == owned_.end()) return;
    node_requests_.emplace_back(kind, std::move(path));
}

std::unique_ptr<node_op> session::finish(node_op* op) {
    dlock::detail::lock_guard lock(mutex_);
    const auto it = std::find_if(node_in_flight_.begin(), node_in_flight_.end(),
                                 [op](const auto& p) { return p.get() == op; });
    if (it == node_in_flight_.end()) return nullptr;
    auto done = std::move(*it);
    node_in_flight_.erase(it);
    return done;
}

void session::on_watch_read(int rc, const char*, int, const Stat*, const void* data) {
    auto* op = static_cast<node_op*>(const_cast<void*>(data));
    const auto done = op->owner->finish(op);
    if (!done) return;
    auto* self = done->owner;
    if (retriable(rc)) {
        self->resend(node_request::watch, std::move(done->path));
        return;  // the reconnection wakes the background thread
    }
    if (rc != ZNONODE) return;
    // Gone before the watch was set (deleted between our grant and the watch, or between the
    // change that used up the previous watch and this one): lost, as if the watch had fired.
    {
        dlock::detail::lock_guard lock(self->mutex_);
        const auto held = self->owned_.find(done->path);
        if (held == self->owned_.end()) return;  // released by us meanwhile
        self->vanished_.push_back(done->path);
        self->owned_.erase(held);
    }
    if (self->wake_) self->wake_();
}

void session::on_wake_set(int rc, const Stat*, const void* data) {
    auto* op = static_cast<node_op*>(const_cast<void*>(data));
    const auto done = op->owner->finish(op);
    if (done && retriable(rc)) done->owner->resend(node_request::wake, std::move(done->path));
}

void session::on_probe_read(int rc, const char*, int, const Stat*, const void* data) {
    auto* op = static_cast<node_op*>(const_cast<void*>(data));
    const auto done = op->owner->finish(op);
    // ZNOAUTH: another identity's node. No watch was set, and none would report its going (the
    // server sends a watch's events only to sessions that may read the node), so there is
    // nothing to look again on: the waiter waits on the node ahead alone, as before step 5.
    // Fired, its waiter would look again and probe again at once, for as long as the node stays.
    if (done && rc != ZOK && rc != ZNOAUTH) done->owner->probe_failed(done->path, rc);
}

void session::disown(const std::string& path) {
    dlock::detail::lock_guard lock(mutex_);
    const auto it = owned_.find(path);
    if (it != owned_.end() && --it->second <= 0) owned_.erase(it);
}

std::vector<std::string> session::take_vanished() {
    dlock::detail::lock_guard lock(mutex_);
    return std::exchange(vanished_, {});
}

int session::create_protected(protected_node& node, const ACL_vector* acl,
                              children_listing* listing) {
    if (node.created()) return ZOK;
    if (node.in_doubt) {
        String_vector children{0, nullptr};
        const int rc = with_handle(
            [&](zhandle_t* zh) { return zoo_get_children(zh, node.parent.c_str(), 0, &children); });
        if (rc != ZOK && rc != ZNONODE) return rc;  // still in doubt
        node.in_doubt = false;
        if (rc == ZOK) {
            for (int i = 0; i < children.count; ++i) {
                if (std::string_view(children.data[i]).starts_with(node.prefix))
                    node.name = children.data[i];
            }
            deallocate_String_vector(&children);
        }
        if (node.created()) {
            // Its czxid (the fencing token) is not in the listing.
            Stat stat{};
            const auto path = node.path();
            const int erc =
                with_handle([&](zhandle_t* zh) { return zoo_exists(zh, path.c_str(), 0, &stat); });
            if (erc == ZOK) {
                node.czxid = static_cast<std::uint64_t>(stat.czxid);
                return ZOK;
            }
            node.name.clear();
            if (retriable(erc)) {
                node.in_doubt = node.doubted = true;  // it may still be there: look again
                return erc;
            }
            if (erc != ZNONODE) return erc;
            // Gone again (deleted by someone): create a new one below.
        }
    }
    const auto want = node.parent + "/" + node.prefix;
    // Both answers come on the C client's completion thread. The wait is inside with_handle, as
    // a synchronous call's would be: close() cannot free the handle before they come, and a
    // connection loss answers every request still pending.
    struct batch {
        dlock::detail::mutex mutex;
        std::condition_variable_any answered;
        int pending DLOCK_GUARDED_BY(mutex) = 0;
        int rc DLOCK_GUARDED_BY(mutex) = ZOK;
        std::string path DLOCK_GUARDED_BY(mutex);
        std::uint64_t czxid DLOCK_GUARDED_BY(mutex) = 0;
        children_listing listed DLOCK_GUARDED_BY(mutex);
    } b;
    const auto created = [](int rc, const char* path, const Stat* stat, const void* data) {
        auto* self = static_cast<batch*>(const_cast<void*>(data));
        dlock::detail::lock_guard lock(self->mutex);
        self->rc = rc;
        if (rc == ZOK) {
            self->path = path;
            self->czxid = static_cast<std::uint64_t>(stat->czxid);
        }
        if (--self->pending == 0) self->answered.notify_all();
    };
    const auto listed = [](int rc, const String_vector* kids, const void* data) {
        auto* self = static_cast<batch*>(const_cast<void*>(data));
        dlock::detail::lock_guard lock(self->mutex);
        self->listed.rc = rc;
        if (rc == ZOK) self->listed.children.assign(kids->data, kids->data + kids->count);
        if (--self->pending == 0) self->answered.notify_all();
    };
    const int rc = with_handle([&](zhandle_t* zh) {
        {
            dlock::detail::lock_guard lock(b.mutex);
            b.pending = listing != nullptr ? 2 : 1;
        }
        // Not under b.mutex: a completion may run (and take it) before the next call returns.
        if (const int r = zoo_acreate2(zh, want.c_str(), nullptr, -1, acl, ZOO_EPHEMERAL_SEQUENTIAL,
                                       created, &b);
            r != ZOK)
            return r;  // not sent: no completion comes
        // The listing is only worth sending with a create that went out; if it cannot go, the
        // caller lists itself.
        const bool listed_too =
            listing != nullptr && zoo_aget_children(zh, node.parent.c_str(), 0, listed, &b) == ZOK;
        dlock::detail::unique_lock lock(b.mutex);
        if (listing != nullptr && !listed_too) --b.pending;
        b.listed.sent = listed_too;
        b.answered.wait(lock, [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS { return b.pending == 0; });
        return b.rc;
    });
    if (retriable(rc)) node.in_doubt = node.doubted = true;  // find it by guid once reconnected
    if (rc != ZOK) return rc;
    dlock::detail::lock_guard lock(b.mutex);
    node.name = b.path.substr(b.path.rfind('/') + 1);
    node.czxid = b.czxid;
    if (listing != nullptr) *listing = std::move(b.listed);
    return ZOK;
}

int session::remove_guaranteed(const std::string& path) {
    const int rc = with_handle([&](zhandle_t* zh) { return zoo_delete(zh, path.c_str(), -1); });
    const bool gone = rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING;
    if (rc != ZOK && rc != ZNONODE && !gone) queue_cleanup({{}, {}, path});
    return rc;
}

void session::remove_guaranteed(const protected_node& node) {
    if (dead()) return;  // its ephemeral nodes are gone with it
    if (node.created()) remove_guaranteed(node.path());
    if (node.in_doubt) queue_cleanup({node.parent, node.guid, {}});
}

void session::queue_cleanup(cleanup_item item) {
    {
        dlock::detail::lock_guard lock(mutex_);
        if (dead_) return;
        cleanup_.push_back(std::move(item));
    }
    if (wake_) wake_();
}

void session::requeue(cleanup_item item) {
    dlock::detail::lock_guard lock(mutex_);
    if (!dead_) cleanup_.push_back(std::move(item));
}

cleanup_op* session::track(std::unique_ptr<cleanup_op> op) {
    dlock::detail::lock_guard lock(mutex_);
    return in_flight_.emplace_back(std::move(op)).get();
}

node_op* session::track(std::unique_ptr<node_op> op) {
    dlock::detail::lock_guard lock(mutex_);
    return node_in_flight_.emplace_back(std::move(op)).get();
}

std::unique_ptr<cleanup_op> session::finish(cleanup_op* op) {
    dlock::detail::lock_guard lock(mutex_);
    const auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                                 [op](const auto& p) { return p.get() == op; });
    if (it == in_flight_.end()) return nullptr;
    auto done = std::move(*it);
    in_flight_.erase(it);
    return done;
}

void session::run_cleanup() {
    std::vector<cleanup_item> items;
    std::vector<std::pair<node_request, std::string>> requests;
    {
        dlock::detail::lock_guard lock(mutex_);
        if (dead_ || state_ != ZOO_CONNECTED_STATE) return;
        items.swap(cleanup_);
        requests.swap(node_requests_);
    }
    for (const auto& [kind, path] : requests) send(kind, path);
    for (auto& item : items) {
        // Registered before it goes out, like send()'s requests.
        auto* const op = track(std::make_unique<cleanup_op>(cleanup_op{this, std::move(item)}));
        int rc = ZOK;
        if (!op->item.path.empty()) {
            rc = with_handle([&](zhandle_t* zh) {
                return zoo_adelete(
                    zh, op->item.path.c_str(), -1,
                    [](int result, const void* data) {
                        auto* op = static_cast<cleanup_op*>(const_cast<void*>(data));
                        const auto done = op->owner->finish(op);
                        if (done && retriable(result)) done->owner->requeue(std::move(done->item));
                    },
                    op);
            });
        } else {
            rc = with_handle([&](zhandle_t* zh) {
                return zoo_aget_children(
                    zh, op->item.parent.c_str(), 0,
                    [](int result, const String_vector* children, const void* data) {
                        auto* op = static_cast<cleanup_op*>(const_cast<void*>(data));
                        const auto done = op->owner->finish(op);
                        if (!done) return;
                        if (retriable(result)) {
                            done->owner->requeue(std::move(done->item));
                            return;
                        }
                        if (result != ZOK || children == nullptr) return;
                        for (int i = 0; i < children->count; ++i) {
                            const std::string child = children->data[i];
                            if (!child.starts_with(done->item.guid)) continue;
                            done->owner->requeue(
                                {done->item.parent, {}, done->item.parent + "/" + child});
                        }
                        if (done->owner->wake_) done->owner->wake_();
                    },
                    op);
            });
        }
        if (rc == ZOK) continue;   // until its completion runs (or we go)
        auto unsent = finish(op);  // no completion will run
        if (unsent && retriable(rc)) requeue(std::move(unsent->item));
    }
}

}  // namespace dlock::zk::detail
