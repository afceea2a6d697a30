#include "redis/watch.hpp"

#include <poll.h>

#include <algorithm>
#include <chrono>

#include "core/status.hpp"

namespace dlock::redis::detail {
namespace {

using dlock::detail::fail;
using namespace std::chrono_literals;

/// Without CLIENT TRACKING a change is reported at least this often (acquisitions publish
/// nothing, so the release channel alone would miss them).
constexpr auto fallback_period = 1s;
/// A server whose connection failed is tried again no sooner than this.
constexpr auto retry_period = 1s;

class redis_watch final : public dlock::lock_watch {
public:
    redis_watch(const std::vector<std::shared_ptr<node>>& servers, std::string lock_key,
                std::string channel)
        : lock_key_(std::move(lock_key)), channel_(std::move(channel)) {
        for (const auto& n : servers) {
            auto p = std::make_unique<server>();
            p->at = n;
            p->conn = n->connect(node::role::watch);
            servers_.push_back(std::move(p));
        }
    }

    /// Subscribes on every server; true when at least one is subscribed.
    bool start(std::error_code& ec) {
        std::error_code last;
        bool any = false;
        for (auto& s : servers_) {
            std::error_code one;
            if (subscribe(*s, one)) {
                any = true;
            } else {
                last = one;
            }
        }
        if (!any) ec = last;
        last_change_ = steady::now();
        return any;
    }

    bool wait_until(steady::time_point deadline, std::error_code& ec) noexcept override {
        ec.clear();
        try {
            return wait(deadline, ec);
        } catch (const std::exception& e) {
            fail(ec, errc::connection_failed, std::string("watch: ") + e.what());
            return true;
        }
    }

private:
    struct server {
        std::shared_ptr<node> at;  // where the connection goes: its current address
        std::unique_ptr<connection> conn;
        bool subscribed = false;
        bool tracking = false;
        steady::time_point retry_at{};
        std::string error;
    };

    bool subscribe(server& s, std::error_code& ec) {
        s.subscribed = false;
        s.conn->close();
        if (!s.at->current(*s.conn)) s.conn = s.at->connect(node::role::watch);  // it moved
        s.retry_at = steady::now() + retry_period;
        auto id = s.conn->execute({"CLIENT", "ID"}, ec);
        if (ec) return false;
        s.tracking = false;
        if (id.type == reply::kind::integer) {
            const auto self = std::to_string(id.integer);
            auto r = s.conn->execute(
                {"CLIENT", "TRACKING", "ON", "REDIRECT", self, "BCAST", "PREFIX", lock_key_}, ec);
            if (ec == make_error_code(errc::auth_failed)) {
                // NOPERM: an ACL without client|tracking. The connection was closed with the
                // refusal; the fallback opens it again.
                ec.clear();
                s.conn->close();
            } else if (ec) {
                return false;
            } else {
                s.tracking = !r.is_error();
            }
        }
        const auto deadline = s.conn->default_deadline();
        if (s.tracking) {
            s.conn->send({"SUBSCRIBE", "__redis__:invalidate"}, ec, deadline);
        } else {
            s.conn->send({"SUBSCRIBE", channel_}, ec, deadline);
        }
        if (ec) return false;
        // The confirmation: from here on every write is reported.
        reply r;
        if (!s.conn->receive(r, deadline, ec)) {
            if (!ec) {
                fail(ec, errc::server_timeout,
                     "redis " + s.conn->settings().endpoint.describe() + ": SUBSCRIBE timed out");
            }
            s.conn->close();
            return false;
        }
        if (r.is_error()) {
            fail(ec, errc::server_error,
                 "redis " + s.conn->settings().endpoint.describe() + ": SUBSCRIBE: " + r.text);
            s.conn->close();
            return false;
        }
        s.subscribed = true;
        return true;
    }

    bool all_tracking() const {
        return std::all_of(servers_.begin(), servers_.end(),
                           [](const auto& s) { return !s->subscribed || s->tracking; });
    }

    bool wait(steady::time_point deadline, std::error_code& ec) {
        for (;;) {
            bool changed = false;
            // Reconnect what failed: a change may have been missed meanwhile.
            std::size_t up = 0;
            std::error_code last;
            for (auto& s : servers_) {
                if (!s->subscribed && steady::now() >= s->retry_at) {
                    std::error_code one;
                    if (subscribe(*s, one)) {
                        changed = true;
                    } else {
                        last = one;
                    }
                }
                if (s->subscribed) ++up;
            }
            if (up == 0) {
                ec = last ? last : make_error_code(errc::connection_failed);
                if (!last) fail(ec, errc::connection_failed, "watch: no server reachable");
                return true;
            }
            const auto now = steady::now();
            if (!all_tracking() && now >= last_change_ + fallback_period) changed = true;
            if (changed) {
                last_change_ = now;
                return true;
            }
            if (now >= deadline) return false;
            auto until = deadline;
            if (!all_tracking()) until = std::min(until, last_change_ + fallback_period);
            for (const auto& s : servers_) {
                if (!s->subscribed) until = std::min(until, s->retry_at);
            }
            std::vector<pollfd> fds;
            std::vector<server*> polled;
            for (auto& s : servers_) {
                if (!s->subscribed) continue;
                fds.push_back({s->conn->native_handle(), s->conn->wanted_events(), 0});
                polled.push_back(s.get());
            }
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(until - steady::now()).count();
            ::poll(fds.data(), fds.size(),
                   static_cast<int>(std::clamp<long long>(left, 0, 60'000)));
            for (std::size_t i = 0; i < fds.size(); ++i) {
                if (fds[i].revents == 0) continue;
                server& s = *polled[i];
                reply r;
                std::error_code one;
                while (s.conn->receive(r, steady::time_point::min(), one)) {
                    // ["message", channel, payload]: an invalidation or a release.
                    if (r.type == reply::kind::array && !r.elements.empty() &&
                        r.elements.front().text == "message") {
                        changed = true;
                    }
                }
                if (one || !s.conn->is_open()) {
                    s.subscribed = false;
                    s.retry_at = steady::now();  // at once: then every retry_period
                }
            }
            if (changed) {
                last_change_ = steady::now();
                return true;
            }
        }
    }

    std::string lock_key_;
    std::string channel_;
    std::vector<std::unique_ptr<server>> servers_;
    steady::time_point last_change_{};
};

}  // namespace

std::unique_ptr<dlock::lock_watch> make_watch(const std::vector<std::shared_ptr<node>>& servers,
                                              const std::string& lock_key,
                                              const std::string& channel, std::error_code& ec) {
    auto w = std::make_unique<redis_watch>(servers, lock_key, channel);
    if (!w->start(ec)) return nullptr;
    return w;
}

}  // namespace dlock::redis::detail
