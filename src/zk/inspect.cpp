// engine::inspect (backend::inspect on ZooKeeper): who holds and who waits, from the children of
// the lock node by the recipe's own rules (recipe.hpp, view_children).
#include <charconv>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "core/validate.hpp"
#include "zk/engine.hpp"

namespace dlock::zk::detail {

using dlock::detail::fail;

namespace {

/// A read whose answer was lost with the connection is simply asked again, a few times.
bool transient(int rc) { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

errc code_of(int rc) {
    if (rc == ZNOAUTH || rc == ZAUTHFAILED) return errc::auth_failed;
    if (transient(rc) || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING)
        return errc::connection_failed;
    return errc::server_error;
}

}  // namespace

lock_info engine::inspect(std::string_view name, std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return {};
        const std::string parent = lock_path(name);
        const auto failed = [&](int rc, const std::string& path) {
            fail(ec, code_of(rc),
                 "inspect \"" + std::string(name) + "\": ZooKeeper " + endpoint_.hosts + ": " +
                     path + ": " + zerror(rc) + " (" + std::to_string(rc) + ")");
            return lock_info{};
        };
        int rc = ZOK;
        for (int round = 0; round < 3; ++round) {
            auto s = session_for(ec);
            if (!s) return {};
            lock_info out;
            out.name = std::string(name);
            // The node's data: a semaphore's number of permits.
            char data[32];
            int size = sizeof data - 1;
            Stat stat{};
            rc = s->with_handle(
                [&](zhandle_t* zh) { return zoo_get(zh, parent.c_str(), 0, data, &size, &stat); });
            if (rc == ZNONODE) return out;  // never used, or its container node was removed
            if (transient(rc)) continue;
            if (rc != ZOK) return failed(rc, parent);
            std::uint64_t limit = 0;
            if (size > 0) {
                const auto [end, err] = std::from_chars(data, data + size, limit);
                if (err != std::errc() || end != data + size || limit == 0 || limit > UINT32_MAX) {
                    limit = 0;
                }
            }
            std::vector<std::string> children;
            rc = s->with_handle([&](zhandle_t* zh) {
                String_vector v{0, nullptr};
                const int r = zoo_get_children(zh, parent.c_str(), 0, &v);
                if (r == ZOK) {
                    for (int i = 0; i < v.count; ++i) children.emplace_back(v.data[i]);
                    deallocate_String_vector(&v);
                }
                return r;
            });
            if (rc == ZNONODE) return out;
            if (transient(rc)) continue;
            if (rc != ZOK) return failed(rc, parent);

            const auto view = view_children(children, limit);
            // The holders' fencing tokens are their nodes' czxid: the largest is the latest.
            for (const auto& child : view.holding) {
                const std::string path = parent + "/" + child;
                Stat child_stat{};
                rc = s->with_handle(
                    [&](zhandle_t* zh) { return zoo_exists(zh, path.c_str(), 0, &child_stat); });
                if (rc == ZNONODE) continue;  // released meanwhile
                if (transient(rc)) break;
                if (rc != ZOK) return failed(rc, path);
                const auto czxid = static_cast<std::uint64_t>(child_stat.czxid);
                out.fencing_counter = std::max(out.fencing_counter.value_or(0), czxid);
            }
            if (transient(rc)) continue;

            if (limit > 0 || view.permit_holders + view.permit_waiters > 0) {
                out.type = lock_type::counting_semaphore;
                if (limit > 0) out.permit_limit = static_cast<std::uint32_t>(limit);
                out.holders = view.permit_holders;
                out.permits_in_use = static_cast<std::uint32_t>(view.permits_in_use);
                out.waiters = view.permit_waiters;
            } else if (view.any_read) {
                out.type = lock_type::shared_mutex;
                out.readers = view.readers;
                out.writer = view.writer;
                out.holders = view.writer ? 1 : view.readers;
                out.waiters = view.lock_waiters;
            } else if (view.writer || view.lock_waiters > 0) {
                out.type = lock_type::exclusive;
                out.holders = view.writer ? 1 : 0;
                out.depth = view.writer ? 1 : 0;
                out.waiters = view.lock_waiters;
            } else if (view.foreign > 0) {
                out.type = lock_type::foreign;
                out.detail = "node " + parent + " has " + std::to_string(view.foreign) +
                             " child node(s) the lock recipe did not make";
            }
            out.held = out.holders > 0;
            return out;
        }
        return failed(rc, parent);
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return {};
    }
}

namespace {

/// The lock node's exists + child watch. ZooKeeper watches are one-shot and see only changes
/// after they are set, so each wait sets both again and first compares the node's stat with the
/// one the previous wait (or watch()) saw: a change in between is reported at once.
class zk_watch final : public dlock::lock_watch {
public:
    zk_watch(engine& e, std::string name, std::string path)
        : engine_(e), name_(std::move(name)), path_(std::move(path)) {}

    /// Reads the node's current stat (no watch): the baseline later waits compare with.
    bool start(std::error_code& ec) {
        auto s = engine_.session_for(ec);
        if (!s) return false;
        session_ = s;
        const int rc = read(*s, false, seen_);
        if (rc != ZOK) return failed(rc, ec);
        return true;
    }

    bool wait_until(steady::time_point deadline, std::error_code& ec) noexcept override {
        ec.clear();
        try {
            auto s = engine_.session_for(ec);
            if (!s) return true;
            const bool new_session = s != session_.lock();
            session_ = s;
            const auto seen = s->watch_begin(path_);
            struct end_watch {
                session& s;
                const std::string& path;
                ~end_watch() { s.watch_end(path); }
            } end{*s, path_};
            node_state now;
            const int rc = read(*s, true, now);
            if (rc != ZOK) {
                failed(rc, ec);
                return true;
            }
            if (new_session || now != seen_) {
                seen_ = now;
                return true;
            }
            s->watch_wait(path_, seen, deadline, {});
            return steady::now() < deadline;
        } catch (const std::exception& e) {
            fail(ec, errc::connection_failed, std::string("watch: ") + e.what());
            return true;
        }
    }

private:
    struct node_state {
        bool exists = false;
        std::int32_t version = 0;   // data (a semaphore's permits)
        std::int32_t cversion = 0;  // children created or deleted
        std::int64_t czxid = 0;     // the node itself was made again
        bool operator==(const node_state&) const = default;
    };

    /// The node's stat, with watches set when `watch`: an exists watch (creation, deletion,
    /// data) and, if it exists, a child watch.
    int read(session& s, bool watch, node_state& out) {
        return s.with_handle([&](zhandle_t* zh) -> int {
            Stat stat{};
            int rc = watch ? zoo_wexists(zh, path_.c_str(), &session::on_event, &s, &stat)
                           : zoo_exists(zh, path_.c_str(), 0, &stat);
            if (rc == ZNONODE) {
                out = {};
                return ZOK;
            }
            if (rc != ZOK) return rc;
            if (watch) {
                String_vector kids{0, nullptr};
                rc = zoo_wget_children2(zh, path_.c_str(), &session::on_event, &s, &kids, &stat);
                if (rc == ZOK) deallocate_String_vector(&kids);
                if (rc == ZNONODE) {
                    out = {};
                    return ZOK;
                }
                if (rc != ZOK) return rc;
            }
            out = {true, stat.version, stat.cversion, stat.czxid};
            return ZOK;
        });
    }

    bool failed(int rc, std::error_code& ec) const {
        fail(ec, code_of(rc),
             "watch \"" + name_ + "\": ZooKeeper " + path_ + ": " + zerror(rc) + " (" +
                 std::to_string(rc) + ")");
        return false;
    }

    engine& engine_;
    std::string name_;
    std::string path_;
    std::weak_ptr<session> session_;
    node_state seen_{};
};

}  // namespace

std::unique_ptr<lock_watch> engine::watch(std::string_view name, std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return nullptr;
        auto w = std::make_unique<zk_watch>(*this, std::string(name), lock_path(name));
        if (!w->start(ec)) return nullptr;
        return w;
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return nullptr;
    }
}

}  // namespace dlock::zk::detail
