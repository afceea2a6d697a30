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

}  // namespace dlock::zk::detail
