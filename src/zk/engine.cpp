#include "zk/engine.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

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

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

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
    worker_ = std::jthread([this](std::stop_token st) { run(st); });
}

void engine::stop() noexcept {
    if (forked()) {
        // A forked child's copy: this thread and the C client's run only in the parent, and
        // closing a session would end the parent's (its ephemeral nodes are the parent's locks).
        // Keep everything, untouched, until the child exits.
        if (auto self = weak_from_this().lock()) {
            dlock::detail::keep_forever(std::move(self));
            return;
        }
        // Called from ~engine without an earlier stop(): keep what must not be destroyed.
        if (worker_.joinable())
            dlock::detail::keep_forever(std::make_shared<std::jthread>(std::move(worker_)));
        if (session_) dlock::detail::keep_forever(std::move(session_));
        for (auto& [ptr, e] : registry_) dlock::detail::keep_forever(e.node);
        return;
    }
    if (worker_.joinable()) {
        worker_.request_stop();
        wake();
        worker_.join();
    }
    std::vector<std::shared_ptr<lease_core>> orphaned;
    std::vector<std::shared_ptr<session>> sessions;
    {
        std::lock_guard lock(mutex_);
        for (auto& [ptr, e] : registry_) {
            if (auto l = e.lease.lock()) orphaned.push_back(std::move(l));
            sessions.push_back(e.node->owner);
            e.node->deleted = true;
        }
        if (session_) sessions.push_back(std::move(session_));
    }
    for (auto& l : orphaned) l->lose(make_error_code(errc::lock_lost), lost_reason::client_closed);
    for (auto& s : sessions) s->close();  // the nodes go with the session
}

void engine::wake() noexcept {
    {
        std::lock_guard lock(mutex_);
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

dlock::lease engine::abandon(const std::shared_ptr<session>& s, const std::string& parent,
                             const std::string& node, const std::string& doubtful_guid,
                             std::string_view name, errc code, std::string message,
                             std::error_code& ec) {
    if (s && !s->dead() && (!node.empty() || !doubtful_guid.empty())) {
        if (!node.empty()) {
            const auto path = parent + "/" + node;
            const int rc =
                s->with_handle([&](zhandle_t* zh) { return zoo_delete(zh, path.c_str(), -1); });
            if (rc != ZOK && rc != ZNONODE) s->queue_cleanup({parent, {}, path});
        }
        if (!doubtful_guid.empty()) s->queue_cleanup({parent, doubtful_guid, {}});
    }
    fail(ec, code, std::move(message));
    if (code != errc::timeout && code != errc::attempts_exhausted && code != errc::canceled)
        notify({event_kind::error, name, 0, ec, steady::now()});
    return {};
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
    std::lock_guard connecting(connect_mutex_);
    std::shared_ptr<session> old;
    {
        std::lock_guard lock(mutex_);
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
        std::lock_guard lock(mutex_);
        session_ = s;
        wake_ = true;
    }
    // Heartbeats start now, not at the background thread's next round: until the first ones
    // settle, validity counts from the session's creation only.
    worker_cv_.notify_all();
    return s;
}

dlock::lease engine::grant(std::string_view name, const lock_options& options,
                           std::shared_ptr<session> s, std::string path, std::uint64_t czxid,
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
                                             czxid, options, sent, valid);
    s->own(node->path);  // a deletion by someone else makes the lease lost at once
    {
        std::lock_guard lock(mutex_);
        registry_[core.get()] = {core, std::move(node)};
        wake_ = true;
    }
    worker_cv_.notify_all();
    notify({event_kind::acquired, name, czxid, {}, steady::now()});
    return dlock::detail::lease_access::make(std::move(core));
}

dlock::lease engine::reenter(std::string_view name, const lock_request& request,
                             const lock_options& options, std::error_code& ec) {
    auto* previous = dlock::detail::lease_access::core(*request.reenter);
    if (previous == nullptr) {
        fail(ec, errc::not_owner, "re-entering lock \"" + std::string(name) + "\": empty lease");
        return {};
    }
    std::shared_ptr<lease_core> core;
    std::shared_ptr<held_node> node;
    {
        std::lock_guard lock(mutex_);
        const auto it = registry_.find(previous);
        if (it == registry_.end() || previous->name() != name) {
            fail(ec, errc::not_owner,
                 "re-entering lock \"" + std::string(name) +
                     "\": the lease is not a live grant of this lock on this client");
            return {};
        }
        node = it->second.node;
        if (node->deleted || previous->state(steady::now()) == lock_state::lost) {
            fail(ec, errc::lock_lost,
                 "re-entering lock \"" + std::string(name) + "\": the grant was lost");
            return {};
        }
        ++node->depth;
        core = std::make_shared<lease_core>(shared_from_this(), std::string(name), node->path,
                                            node->czxid, options, steady::now(),
                                            previous->valid_until());
        registry_[core.get()] = {core, node};
    }
    notify({event_kind::acquired, name, node->czxid, {}, steady::now()});
    return dlock::detail::lease_access::make(std::move(core));
}

dlock::lease engine::acquire_until(std::string_view name, const lock_request& request,
                                   const lock_options& options, steady::time_point deadline,
                                   std::error_code& ec) noexcept {
    ec.clear();
    const dlock::detail::acquire_call call(*this, name, ec);  // since/waited, gave_up
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (!ec) dlock::detail::validate_lock_options(options, ec);
        if (ec) return {};
        if (request.kind == lock_kind::permits)
            return acquire_permits(name, request, options, deadline, ec);
        if (request.kind == lock_kind::reentrant && request.reenter != nullptr)
            return reenter(name, request, options, ec);

        const bool read = request.kind == lock_kind::read;
        const std::string parent = lock_path(name);
        const std::string guid = dlock::detail::random_token();
        const std::string prefix = node_prefix(guid, read);
        const std::string quoted = "lock \"" + std::string(name) + "\"";
        std::shared_ptr<session> s;
        std::string node;  // our child's name, once known
        std::uint64_t czxid = 0;
        bool unknown = false;  // a create may have landed without our knowing (protection mode)
        bool waiting = false;
        unsigned attempts = 0;
        std::vector<std::string> children;

        // Giving up: our node (or the guid whose create is in doubt) must not stay behind.
        const auto give_up = [&](errc code, std::string message) {
            return abandon(s, parent, node, unknown ? guid : std::string(), name, code,
                           std::move(message), ec);
        };
        const auto recoverable = [&](int rc) {
            return zk::detail::recoverable(*s, rc, options.cancel);
        };

        for (;;) {
            if (options.cancel.stop_requested())
                return give_up(errc::canceled, "waiting for " + quoted + " was canceled");
            if (s && s->stale(steady::now())) s->mark_dead();
            if (!s || s->dead()) {
                // A dead session took our node with it: start over on a new one (not yet granted).
                node.clear();
                unknown = false;
                s = session_for(ec);
                if (!s) {
                    notify({event_kind::error, name, 0, ec, steady::now()});
                    return {};
                }
            }
            // Disconnected: wait for the session to come back, but not past the point where it can
            // no longer be trusted (the server may expire it from then on, and with the whole
            // ensemble down nobody would tell us): then start over on a new session, which fails
            // with connection_failed within connect_timeout if the ensemble is still unreachable.
            if (!s->connected() &&
                !s->wait_connected(std::min(deadline, s->valid_until()), options.cancel)) {
                if (s->dead()) continue;
                if (options.cancel.stop_requested())
                    return give_up(errc::canceled, "waiting for " + quoted + " was canceled");
                if (steady::now() < deadline && !s->connected()) {
                    s->mark_dead();
                    continue;
                }
                return give_up(errc::connection_failed,
                               "ZooKeeper " + endpoint_.hosts + ": disconnected while acquiring " +
                                   quoted + " and not back before the deadline");
            }
            if (unknown) {
                const int rc = get_children(*s, parent, children);
                if (rc != ZOK && rc != ZNONODE) {
                    if (recoverable(rc)) continue;
                    return give_up(code_for(rc), quoted + ": getChildren: " + zk_text(rc));
                }
                unknown = false;
                for (const auto& c : children) {
                    if (c.starts_with(prefix)) node = c;
                }
                if (!node.empty()) {
                    Stat stat{};
                    const auto path = parent + "/" + node;
                    const int erc = s->with_handle(
                        [&](zhandle_t* zh) { return zoo_exists(zh, path.c_str(), 0, &stat); });
                    if (erc == ZOK) {
                        czxid = static_cast<std::uint64_t>(stat.czxid);
                    } else {
                        node.clear();
                        if (retriable(erc)) unknown = true;  // it may still be there: look again
                        if (recoverable(erc)) continue;
                    }
                }
            }
            if (node.empty()) {
                const auto want = parent + "/" + prefix;
                std::vector<char> buffer(want.size() + 32);
                Stat stat{};
                const int rc = s->with_handle([&](zhandle_t* zh) {
                    return zoo_create2(zh, want.c_str(), nullptr, -1, acl(),
                                       ZOO_EPHEMERAL_SEQUENTIAL, buffer.data(),
                                       static_cast<int>(buffer.size()), &stat);
                });
                if (rc == ZNONODE) {
                    const int prc = ensure_path(*s, parent, ZOO_CONTAINER);
                    if (prc == ZOK || recoverable(prc)) continue;
                    return give_up(code_for(prc),
                                   quoted + ": cannot create " + parent + ": " + zk_text(prc));
                }
                if (retriable(rc)) {
                    unknown = true;  // protection mode: find it by its guid once reconnected
                    continue;
                }
                if (session_gone(rc)) continue;
                if (rc != ZOK) return give_up(code_for(rc), quoted + ": create: " + zk_text(rc));
                node = base_name(buffer.data());
                czxid = static_cast<std::uint64_t>(stat.czxid);
            }
            const auto sent = steady::now();
            const int rc = get_children(*s, parent, children);
            if (rc != ZOK) {
                if (recoverable(rc)) continue;
                if (rc == ZNONODE) {  // the container went with our node: start over
                    node.clear();
                    continue;
                }
                return give_up(code_for(rc), quoted + ": getChildren: " + zk_text(rc));
            }
            // A duplicate of ours (a create we believed lost that landed after all, seen late
            // after a reconnection) would queue us behind ourselves: delete it and look again.
            bool duplicate = false;
            for (const auto& c : children) {
                if (c == node || !c.starts_with(guid)) continue;
                const auto path = parent + "/" + c;
                s->with_handle([&](zhandle_t* zh) { return zoo_delete(zh, path.c_str(), -1); });
                duplicate = true;
            }
            if (duplicate) continue;
            // One name, one kind (backend.hpp): a semaphore's nodes are not part of this queue.
            if (std::any_of(children.begin(), children.end(), is_permit_node)) {
                return give_up(errc::unexpected_reply,
                               quoted + " is used as a counting_semaphore; a name serves one kind");
            }
            const auto where = locate(children, node);
            if (!where.found) {  // our node is gone (session expired, or deleted by someone)
                node.clear();
                continue;
            }
            if (where.holds) return grant(name, options, s, parent + "/" + node, czxid, sent);
            ++attempts;
            if (!waiting) {
                waiting = true;
                notify({event_kind::wait_started, name, 0, {}, steady::now()});
            }
            if (options.max_attempts && attempts >= *options.max_attempts) {
                return give_up(
                    errc::attempts_exhausted,
                    quoted + " still held after " + std::to_string(attempts) + " attempts");
            }
            if (steady::now() >= deadline)
                return give_up(errc::timeout, quoted + " is held by someone else");
            // Watch only the node we wait for (no herd). ZNONODE: it went between getChildren
            // and exists, so look again at once.
            const auto watched = parent + "/" + where.watch;
            const auto seen = s->watch_begin(watched);
            Stat stat{};
            const int wrc = s->with_handle([&](zhandle_t* zh) {
                return zoo_wexists(zh, watched.c_str(), &session::on_event, s.get(), &stat);
            });
            if (wrc == ZOK) s->watch_wait(watched, seen, deadline, options.cancel);
            s->watch_end(watched);
            if (wrc != ZOK && wrc != ZNONODE && !recoverable(wrc))
                return give_up(code_for(wrc), quoted + ": exists: " + zk_text(wrc));
        }
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    } catch (const std::system_error& e) {
        fail(ec, e.code(), e.what());
    }
    return {};
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

dlock::lease engine::acquire_permits(std::string_view name, const lock_request& request,
                                     const lock_options& options, steady::time_point deadline,
                                     std::error_code& ec) {
    const std::string quoted = "semaphore \"" + std::string(name) + "\"";
    if (request.count < 1 || request.limit < request.count) {
        fail(ec, errc::invalid_argument,
             quoted + ": count must be >= 1 and <= limit, got count=" +
                 std::to_string(request.count) + " limit=" + std::to_string(request.limit));
        return {};
    }
    const std::string parent = lock_path(name);
    const std::string guid = dlock::detail::random_token();
    const std::string prefix = permit_prefix(guid, request.count);
    std::shared_ptr<session> s;
    std::string node;
    std::uint64_t czxid = 0;
    bool unknown = false;
    bool waiting = false;
    unsigned attempts = 0;
    std::vector<std::string> children;

    const auto give_up = [&](errc code, std::string message) {
        return abandon(s, parent, node, unknown ? guid : std::string(), name, code,
                       std::move(message), ec);
    };
    const auto recoverable = [&](int rc) {
        return zk::detail::recoverable(*s, rc, options.cancel);
    };

    for (;;) {
        if (options.cancel.stop_requested())
            return give_up(errc::canceled, "waiting for " + quoted + " was canceled");
        if (s && s->stale(steady::now())) s->mark_dead();
        if (!s || s->dead()) {
            node.clear();
            unknown = false;
            s = session_for(ec);
            if (!s) {
                notify({event_kind::error, name, 0, ec, steady::now()});
                return {};
            }
        }
        // Disconnected: wait for the session to come back, but not past the point where it can
        // no longer be trusted (the server may expire it from then on, and with the whole ensemble
        // down nobody would tell us): then start over on a new session, which fails with
        // connection_failed within connect_timeout if the ensemble is still unreachable.
        if (!s->connected() &&
            !s->wait_connected(std::min(deadline, s->valid_until()), options.cancel)) {
            if (s->dead()) continue;
            if (options.cancel.stop_requested())
                return give_up(errc::canceled, "waiting for " + quoted + " was canceled");
            if (steady::now() < deadline && !s->connected()) {
                s->mark_dead();
                continue;
            }
            return give_up(errc::connection_failed, "ZooKeeper " + endpoint_.hosts +
                                                        ": disconnected while acquiring " + quoted +
                                                        " and not back before the deadline");
        }
        std::uint64_t limit = 0;
        if (const int rc = read_limit(*s, parent, request.limit, limit); rc != ZOK) {
            if (recoverable(rc)) continue;
            return give_up(code_for(rc), quoted + ": reading its permits: " + zk_text(rc));
        }
        if (unknown) {
            const int rc = get_children(*s, parent, children);
            if (rc != ZOK && rc != ZNONODE) {
                if (recoverable(rc)) continue;
                return give_up(code_for(rc), quoted + ": getChildren: " + zk_text(rc));
            }
            unknown = false;
            for (const auto& c : children) {
                if (c.starts_with(prefix)) node = c;
            }
            if (!node.empty()) {
                Stat stat{};
                const auto path = parent + "/" + node;
                const int erc = s->with_handle(
                    [&](zhandle_t* zh) { return zoo_exists(zh, path.c_str(), 0, &stat); });
                if (erc == ZOK) {
                    czxid = static_cast<std::uint64_t>(stat.czxid);
                } else {
                    node.clear();
                    if (retriable(erc)) unknown = true;
                    if (recoverable(erc)) continue;
                }
            }
        }
        if (node.empty()) {
            const auto want = parent + "/" + prefix;
            std::vector<char> buffer(want.size() + 32);
            Stat stat{};
            const int rc = s->with_handle([&](zhandle_t* zh) {
                return zoo_create2(zh, want.c_str(), nullptr, -1, acl(), ZOO_EPHEMERAL_SEQUENTIAL,
                                   buffer.data(), static_cast<int>(buffer.size()), &stat);
            });
            if (rc == ZNONODE) continue;  // the parent is re-created by read_limit
            if (retriable(rc)) {
                unknown = true;
                continue;
            }
            if (recoverable(rc)) continue;
            if (rc != ZOK) return give_up(code_for(rc), quoted + ": create: " + zk_text(rc));
            node = base_name(buffer.data());
            czxid = static_cast<std::uint64_t>(stat.czxid);
        }
        const auto sent = steady::now();
        const int rc = get_children(*s, parent, children);
        if (rc != ZOK) {
            if (recoverable(rc)) continue;
            if (rc == ZNONODE) {
                node.clear();
                continue;
            }
            return give_up(code_for(rc), quoted + ": getChildren: " + zk_text(rc));
        }
        bool duplicate = false;
        for (const auto& c : children) {
            if (c == node || !c.starts_with(guid)) continue;
            const auto path = parent + "/" + c;
            s->with_handle([&](zhandle_t* zh) { return zoo_delete(zh, path.c_str(), -1); });
            duplicate = true;
        }
        if (duplicate) continue;
        if (std::any_of(children.begin(), children.end(),
                        [](const std::string& c) { return parse_node(c).has_value(); })) {
            return give_up(errc::unexpected_reply,
                           quoted + " is used as a lock; a name serves one kind");
        }
        const auto where = locate_permits(children, node, limit);
        if (!where.found) {
            node.clear();
            continue;
        }
        if (where.holds) {
            if (where.has_successor) {
                // The node after ours may be watching us: a data change tells it we hold, so it
                // becomes first in line and watches the children (docs/zookeeper.md, Semaphore).
                // Retried until answered: a lost set would leave it asleep while permits are
                // free (our session's end deletes the node, which wakes it too).
                s->wake_successor(parent + "/" + node);
            }
            return grant(name, options, s, parent + "/" + node, czxid, sent);
        }
        ++attempts;
        if (!waiting) {
            waiting = true;
            notify({event_kind::wait_started, name, 0, {}, steady::now()});
        }
        if (options.max_attempts && attempts >= *options.max_attempts) {
            return give_up(errc::attempts_exhausted,
                           quoted + " still full after " + std::to_string(attempts) + " attempts");
        }
        if (steady::now() >= deadline)
            return give_up(errc::timeout, quoted + " has no permits free");
        // First in line: watch the children (a release) and the node's data (set_permits).
        // Behind another waiter: watch only it (deleted, or set once it holds).
        const auto watched = where.first_waiter ? parent : parent + "/" + where.watch;
        const auto seen = s->watch_begin(watched);
        int wrc = ZOK;
        bool changed = false;  // seen when setting the watch: look again instead of waiting
        if (where.first_waiter) {
            wrc = s->with_handle([&](zhandle_t* zh) {
                String_vector kids{0, nullptr};
                int r = zoo_wget_children(zh, watched.c_str(), &session::on_event, s.get(), &kids);
                if (r != ZOK) return r;
                std::vector<std::string> now(kids.data, kids.data + kids.count);
                deallocate_String_vector(&kids);
                changed = locate_permits(now, node, limit).holds;
                char data[32];
                int size = sizeof data;
                r = zoo_wget(zh, watched.c_str(), &session::on_event, s.get(), data, &size,
                             nullptr);
                if (r == ZOK && std::string_view(data, std::max(size, 0)) != std::to_string(limit))
                    changed = true;
                return r;
            });
        } else {
            Stat stat{};
            wrc = s->with_handle([&](zhandle_t* zh) {
                return zoo_wexists(zh, watched.c_str(), &session::on_event, s.get(), &stat);
            });
            changed = wrc == ZOK && stat.dataLength > 0;  // it holds already: we are first now
        }
        // A watch fires only for changes after it was set: what changed since our getChildren
        // was read back above.
        if (wrc == ZOK && !changed) s->watch_wait(watched, seen, deadline, options.cancel);
        s->watch_end(watched);
        if (wrc != ZOK && wrc != ZNONODE && !recoverable(wrc))
            return give_up(code_for(wrc), quoted + ": watch: " + zk_text(wrc));
    }
}

void engine::release(lease_core& lease, std::error_code& ec) noexcept {
    ec.clear();
    std::shared_ptr<held_node> node;
    bool last = false;
    {
        std::lock_guard lock(mutex_);
        const auto it = registry_.find(&lease);
        if (it != registry_.end()) {
            node = it->second.node;
            registry_.erase(it);
            last = --node->depth == 0 && !node->deleted;
            if (last) node->deleted = true;
        }
    }
    lease.mark_released();
    try {
        if (!node) {
            return fail(ec, errc::lock_lost,
                        "lock \"" + lease.name() + "\": the client was closed; nothing to release");
        }
        if (node->depth > 0 && !node->deleted) {  // one re-entry level left; the node stays
            return;                               // dlock::lease reports the released event
        }
        if (!last) {
            return fail(ec, errc::lock_lost,
                        "lock \"" + lease.name() + "\" was lost before it was released");
        }
        node->owner->disown(node->path);  // our own delete is no loss
        const int rc = node->owner->with_handle(
            [&](zhandle_t* zh) { return zoo_delete(zh, node->path.c_str(), -1); });
        if (rc == ZOK) return;  // dlock::lease reports the released event
        if (rc == ZNONODE || session_gone(rc)) {
            lease.note_loss(rc == ZNONODE ? lost_reason::deleted : lost_reason::session_expired);
            fail(ec, errc::lock_lost,
                 "lock \"" + lease.name() + "\": our node " + node->path +
                     " was already gone (session expired)");
        } else {
            // Unknown outcome: delete it once reconnected (or it goes with the session).
            node->owner->queue_cleanup({{}, {}, node->path});
            fail(ec, code_for(rc),
                 "release of \"" + lease.name() + "\": delete " + node->path + ": " + zk_text(rc) +
                     "; retried once reconnected, or it goes with the session");
        }
        notify({event_kind::error, lease.name(), lease.fencing_token(), ec, steady::now()});
    } catch (...) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "release: out of memory");
    }
}

steady::time_point engine::check_leases(steady::time_point now) {
    std::vector<std::pair<std::shared_ptr<lease_core>, lost_reason>> lost;
    std::vector<std::shared_ptr<lease_core>> went_uncertain;  // reported outside mutex_
    std::vector<std::pair<std::shared_ptr<session>, std::string>> doomed;  // nodes to delete
    auto next = steady::time_point::max();
    {
        std::lock_guard lock(mutex_);
        // Held nodes someone else deleted (session::own's watches).
        std::vector<std::string> vanished;
        for (const auto& [ptr, e] : registry_) {
            if (auto v = e.node->owner->take_vanished(); !v.empty())
                vanished.insert(vanished.end(), v.begin(), v.end());
        }
        for (auto it = registry_.begin(); it != registry_.end();) {
            auto lease = it->second.lease.lock();
            if (!lease) {
                it = registry_.erase(it);
                continue;
            }
            auto& node = *it->second.node;
            ++it;
            if (lease->released() || lease->lost_token().stop_requested()) continue;
            auto& s = *node.owner;
            if (std::find(vanished.begin(), vanished.end(), node.path) != vanished.end()) {
                node.deleted = true;
                lost.emplace_back(std::move(lease), lost_reason::deleted);  // by someone else
                continue;
            }
            if (s.dead()) {
                node.deleted = true;
                lost.emplace_back(std::move(lease), lost_reason::session_expired);
                continue;
            }
            const auto bound = std::min(s.valid_until(), node.cap_valid);
            if (now >= node.cap_valid) {
                if (!node.deleted) doomed.emplace_back(node.owner, node.path);
                node.deleted = true;
                // max_hold ran out, or (renew = false) the fixed lease did.
                const auto& plan = lease->plan();
                lost.emplace_back(std::move(lease), plan.renew || plan.max_hold <= plan.lease
                                                        ? lost_reason::max_hold
                                                        : lost_reason::expired);
                continue;
            }
            if (now >= bound) {
                // Disconnected past the bound: the server may expire the session from now on.
                // If we reconnect in time the node is deleted, as nobody trusts it any more.
                if (!node.deleted) doomed.emplace_back(node.owner, node.path);
                node.deleted = true;
                // No answer from ZooKeeper within the session timeout.
                lost.emplace_back(std::move(lease), lost_reason::expired);
                continue;
            }
            if (s.connected() && !s.overdue(now)) {
                lease->renewed(bound);
            } else {
                if (lease->renewal_failed()) went_uncertain.push_back(lease);
            }
            next = std::min(next, bound);
        }
    }
    // Outside mutex_: queue_cleanup wakes this thread, which takes mutex_.
    for (auto& [s, path] : doomed) s->queue_cleanup({{}, {}, path});
    // The observer and on_lost hear why through the lost event (as with Redis, no error report).
    for (auto& lease : went_uncertain) lease->report_renewal_failed();
    for (auto& [lease, reason] : lost) lease->lose(make_error_code(errc::lock_lost), reason);
    return next;
}

void engine::run(std::stop_token stop) {
    while (!stop.stop_requested()) {
        const auto now = steady::now();
        auto next = check_leases(now);
        std::vector<std::shared_ptr<session>> sessions;
        {
            std::lock_guard lock(mutex_);
            if (session_) sessions.push_back(session_);
            for (const auto& [ptr, e] : registry_) {
                if (std::find(sessions.begin(), sessions.end(), e.node->owner) == sessions.end())
                    sessions.push_back(e.node->owner);
            }
        }
        for (auto& s : sessions) {
            if (s->dead()) continue;
            next = std::min(next, s->heartbeat(now));
            s->run_cleanup();
        }
        sessions.clear();
        std::unique_lock lock(mutex_);
        worker_cv_.wait_until(lock, stop, std::min(next, now + std::chrono::seconds(1)),
                              [&] { return wake_; });
        wake_ = false;
    }
}

}  // namespace dlock::zk::detail
