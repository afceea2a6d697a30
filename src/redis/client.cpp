#include <dlock/redis/client.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/lease_core.hpp"
#include "core/status.hpp"
#include "core/token.hpp"
#include "core/validate.hpp"
#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "redis/subscriber.hpp"

namespace dlock::redis {

using dlock::detail::deadline_after;
using dlock::detail::fail;
using dlock::detail::lease_core;
using dlock::detail::steady;
using namespace detail;

namespace {

connection_settings settings_for(const client_options& o, const dlock::detail::redis_endpoint& ep, const char* role) {
    return {ep, o.connect_timeout, o.command_timeout, std::string("dlock:") + role};
}

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()); }

}  // namespace

class client::impl final : public dlock::detail::lease_owner, public std::enable_shared_from_this<impl> {
public:
    explicit impl(client_options options);
    ~impl() override { stop(); }

    void start() { worker_ = std::jthread([this](std::stop_token st) { run(st); }); }
    void stop() noexcept;

    lease acquire_until(std::string_view name, const lock_options& options, steady::time_point deadline,
                        std::error_code& ec) noexcept;
    reply command(const std::vector<std::string>& args, std::error_code& ec) noexcept;

    std::string key(std::string_view name) const { return options_.key_prefix + ":{" + std::string(name) + "}"; }
    std::string fence(std::string_view name) const { return key(name) + ":fence"; }
    std::string channel(std::string_view name) const { return key(name) + ":released"; }

    // lease_owner
    void release(lease_core& lease, std::error_code& ec) noexcept override;
    void report_error(std::error_code ec, std::string_view what) noexcept override;
    void notify(const lock_event& event) noexcept override;

private:
    /// A pooled command connection, returned to the pool when it goes out of scope.
    class pooled {
    public:
        explicit pooled(impl& owner) : owner_(owner), conn_(owner.take_connection()) {}
        ~pooled() { owner_.give_back(std::move(conn_)); }
        connection& operator*() { return *conn_; }
        connection* operator->() { return conn_.get(); }

    private:
        impl& owner_;
        std::unique_ptr<connection> conn_;
    };
    std::unique_ptr<connection> take_connection();
    void give_back(std::unique_ptr<connection> conn) noexcept;

    struct attempt_result {
        bool granted = false;
        std::uint64_t fencing_token = 0;
        std::int64_t holder_ms = -1;  // remaining lease of the holder when not granted; -1 unknown
    };
    attempt_result attempt(std::string_view name, const std::string& token, std::chrono::milliseconds lease,
                           std::error_code& ec);

    void track(const std::shared_ptr<lease_core>& lease);
    void wake() noexcept;
    void run(std::stop_token stop);
    steady::time_point renew_due(steady::time_point now);

    const client_options options_;
    dlock::detail::redis_endpoint endpoint_;
    connection_settings command_settings_;
    connection_settings renew_settings_;
    connection_settings subscriber_settings_;

    std::mutex pool_mutex_;  // guards idle_
    std::vector<std::unique_ptr<connection>> idle_;

    struct tracked {
        std::weak_ptr<lease_core> lease;
        steady::time_point next_renewal;
    };
    std::mutex registry_mutex_;  // guards registry_
    std::unordered_map<const lease_core*, tracked> registry_;
    std::atomic<steady::rep> worker_wakes_at_{steady::time_point::max().time_since_epoch().count()};

    int wake_fd_ = -1;
    std::unique_ptr<subscriber> subscriber_;
    std::unique_ptr<connection> renew_conn_;  // background thread only
    std::jthread worker_;
};

client::impl::impl(client_options options) : options_(std::move(options)) {
    std::error_code ec;
    endpoint_ = dlock::detail::parse_redis_url(options_.url, ec);
    dlock::detail::throw_if(ec);
    if (endpoint_.kind == dlock::detail::redis_endpoint::transport::tls) {
        make_transport(endpoint_, ec);
        dlock::detail::throw_if(ec);
    }
    const auto positive = [](std::chrono::milliseconds d, const char* field) {
        if (d <= std::chrono::milliseconds::zero()) {
            throw error(errc::invalid_argument,
                        std::string("client_options.") + field + " must be > 0, got " + ms_text(d) + "ms");
        }
    };
    positive(options_.connect_timeout, "connect_timeout");
    positive(options_.command_timeout, "command_timeout");
    if (options_.key_prefix.empty() || options_.key_prefix.find_first_of("{}") != std::string::npos) {
        throw error(errc::invalid_argument,
                    "client_options.key_prefix \"" + options_.key_prefix + "\" must be non-empty and free of '{' '}'");
    }
    command_settings_ = settings_for(options_, endpoint_, "cmd");
    renew_settings_ = settings_for(options_, endpoint_, "renew");
    subscriber_settings_ = settings_for(options_, endpoint_, "sub");
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
    subscriber_ = std::make_unique<subscriber>(subscriber_settings_, [this] { wake(); });
    renew_conn_ = std::make_unique<connection>(renew_settings_);
}

void client::impl::stop() noexcept {
    if (worker_.joinable()) {
        worker_.request_stop();
        wake();
        worker_.join();
    }
    // Nobody renews or watches the leases still alive: they can no longer be guaranteed.
    std::vector<std::shared_ptr<lease_core>> orphaned;
    {
        std::lock_guard lock(registry_mutex_);
        for (auto& [ptr, t] : registry_) {
            if (auto lease = t.lease.lock()) orphaned.push_back(std::move(lease));
        }
        registry_.clear();
    }
    for (auto& lease : orphaned) lease->lose(make_error_code(errc::lock_lost));
    if (subscriber_) subscriber_->wake_all();
    if (wake_fd_ >= 0) {
        ::close(wake_fd_);
        wake_fd_ = -1;
    }
}

void client::impl::wake() noexcept {
    if (wake_fd_ < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
}

std::unique_ptr<connection> client::impl::take_connection() {
    {
        std::lock_guard lock(pool_mutex_);
        if (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            return c;
        }
    }
    return std::make_unique<connection>(command_settings_);
}

void client::impl::give_back(std::unique_ptr<connection> conn) noexcept {
    constexpr std::size_t max_idle = 32;  // beyond this, a burst's extra connections are closed
    std::lock_guard lock(pool_mutex_);
    if (idle_.size() < max_idle) idle_.push_back(std::move(conn));
}

void client::impl::report_error(std::error_code ec, std::string_view what) noexcept {
    try {
        if (options_.error_handler) {
            options_.error_handler(ec, what);
            return;
        }
    } catch (...) {
        // The handler itself failed: fall through to stderr rather than lose the report.
    }
    std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(what.size()), what.data());
}

void client::impl::notify(const lock_event& event) noexcept {
    if (!options_.observer) return;
    try {
        options_.observer(event);
    } catch (const std::exception& e) {
        report_error(make_error_code(errc::invalid_argument), std::string("observer threw: ") + e.what());
    } catch (...) {
        report_error(make_error_code(errc::invalid_argument), "observer threw a non-standard exception");
    }
}

reply client::impl::command(const std::vector<std::string>& args, std::error_code& ec) noexcept {
    ec.clear();
    try {
        if (args.empty()) {
            fail(ec, errc::invalid_argument, "command: no arguments");
            return {};
        }
        pooled conn(*this);
        const command_args view(args.begin(), args.end());
        return conn->execute(view, ec);
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return {};
    }
}

client::impl::attempt_result client::impl::attempt(std::string_view name, const std::string& token,
                                                   std::chrono::milliseconds lease, std::error_code& ec) {
    const script_call call{&acquire_script(), {key(name), fence(name)}, {token, ms_text(lease)}};
    pooled conn(*this);
    const auto r = run_script(*conn, call, ec);
    if (ec) return {};
    if (r.type != reply::kind::array || r.elements.size() != 2 ||
        r.elements[0].type != reply::kind::integer || r.elements[1].type != reply::kind::integer) {
        script_error(call, r, *conn, ec);
        return {};
    }
    if (r.elements[0].integer == 1) return {true, static_cast<std::uint64_t>(r.elements[1].integer), 0};
    return {false, 0, r.elements[1].integer};
}

lease client::impl::acquire_until(std::string_view name, const lock_options& options, steady::time_point deadline,
                                  std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (!ec) dlock::detail::validate_lock_options(options, ec);
        if (ec) return {};
        const auto plan = dlock::detail::make_renewal_plan(options);
        std::optional<subscriber::registration> waiting;
        unsigned attempts = 0;
        for (;;) {
            // Read the generation BEFORE the attempt: a release after a failed attempt bumps it.
            const auto seen = waiting ? waiting->generation() : 0;
            const auto token = dlock::detail::random_token();
            const auto sent = steady::now();
            const auto lease_ms = *dlock::detail::lease_to_request(plan, sent, sent);
            const auto result = attempt(name, token, lease_ms, ec);
            if (ec) {
                notify({event_kind::error, name, 0, ec, steady::now()});
                return {};
            }
            ++attempts;
            if (result.granted) {
                auto core = std::make_shared<lease_core>(shared_from_this(), std::string(name), token,
                                                         result.fencing_token, options, sent,
                                                         dlock::detail::valid_until(sent, lease_ms));
                track(core);
                notify({event_kind::acquired, name, result.fencing_token, {}, steady::now()});
                return dlock::detail::lease_access::make(std::move(core));
            }
            const auto now = steady::now();
            if (options.max_attempts && attempts >= *options.max_attempts) {
                fail(ec, errc::attempts_exhausted,
                     "lock \"" + std::string(name) + "\" still held after " + std::to_string(attempts) + " attempts");
                return {};
            }
            if (now >= deadline) {
                fail(ec, errc::timeout, "lock \"" + std::string(name) + "\" is held by someone else");
                return {};
            }
            if (!waiting) {
                // Register for the release notification, then attempt again at once: a release
                // between the first attempt and the subscription is caught by that attempt.
                notify({event_kind::wait_started, name, 0, {}, now});
                waiting.emplace(*subscriber_, channel(name));
                waiting->wait_subscribed(std::min(deadline, deadline_after(now, options_.command_timeout)));
                continue;
            }
            // Pub/sub is lossy and a crashed holder sends nothing: the holder's remaining lease
            // bounds the sleep. Unknown expiry (a key set without one): re-check after our lease.
            const auto fallback = result.holder_ms >= 0 ? std::chrono::milliseconds(result.holder_ms) : lease_ms;
            const auto jitter = std::chrono::nanoseconds(dlock::detail::random_jitter_ns(2'000'000));
            const auto retry_at = std::min(deadline, deadline_after(now, fallback) + jitter);
            waiting->wait(seen, retry_at);
        }
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    } catch (const std::system_error& e) {
        fail(ec, e.code(), e.what());
    }
    return {};
}

void client::impl::release(lease_core& lease, std::error_code& ec) noexcept {
    ec.clear();
    {
        std::lock_guard lock(registry_mutex_);
        registry_.erase(&lease);
    }
    try {
        const script_call call{&release_script(), {key(lease.name())}, {lease.token(), channel(lease.name())}};
        pooled conn(*this);
        const auto r = run_script(*conn, call, ec);
        if (!ec && r.type != reply::kind::integer) script_error(call, r, *conn, ec);
        const bool was_ours = !ec && r.integer == 1;
        lease.mark_released();
        if (was_ours) {
            notify({event_kind::released, lease.name(), lease.fencing_token(), {}, steady::now()});
            return;
        }
        if (!ec) {
            fail(ec, errc::lock_lost,
                 "lock \"" + lease.name() + "\" was no longer held by this owner (expired or taken over)");
        }
        notify({event_kind::error, lease.name(), lease.fencing_token(), ec, steady::now()});
    } catch (...) {
        lease.mark_released();
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "release: out of memory");
    }
}

void client::impl::track(const std::shared_ptr<lease_core>& lease) {
    const auto next = std::min(dlock::detail::next_renewal_at(lease->plan(), lease->granted_at(), lease->granted_at()),
                               lease->valid_until());
    {
        std::lock_guard lock(registry_mutex_);
        registry_[lease.get()] = {lease, next};
    }
    // Only wake the background thread if it would otherwise sleep past this lease's first due time.
    if (next.time_since_epoch().count() < worker_wakes_at_.load()) wake();
}

steady::time_point client::impl::renew_due(steady::time_point now) {
    struct due_lease {
        std::shared_ptr<lease_core> lease;
        std::chrono::milliseconds request;
    };
    std::vector<due_lease> due;
    std::vector<std::shared_ptr<lease_core>> expired;
    {
        std::lock_guard lock(registry_mutex_);
        for (auto it = registry_.begin(); it != registry_.end();) {
            auto lease = it->second.lease.lock();
            if (!lease || lease->released()) {
                it = registry_.erase(it);
                continue;
            }
            if (now >= lease->valid_until()) {
                expired.push_back(std::move(lease));
                it = registry_.erase(it);
                continue;
            }
            // Renew a little early so leases that fall due close together share one pipeline.
            const auto slack = lease->plan().every / 8;
            if (it->second.next_renewal <= now + slack) {
                const auto request = dlock::detail::lease_to_request(lease->plan(), lease->granted_at(), now);
                if (request && lease->plan().renew) {
                    due.push_back({std::move(lease), *request});
                } else {
                    it->second.next_renewal = lease->valid_until();  // max_hold reached: let it run out
                }
            }
            ++it;
        }
    }
    for (auto& lease : expired) {
        lease->lose(make_error_code(errc::lock_lost));
    }
    if (!due.empty()) {
        std::vector<script_call> calls;
        calls.reserve(due.size());
        for (const auto& d : due) {
            calls.push_back({&renew_script(), {key(d.lease->name())}, {d.lease->token(), ms_text(d.request)}});
        }
        const auto sent = steady::now();
        // Never block past the earliest lease deadline in the batch: its loss must be reported on time.
        auto latest = steady::time_point::max();
        for (const auto& d : due) latest = std::min(latest, d.lease->valid_until());
        std::error_code ec;
        const auto replies = run_scripts(*renew_conn_, calls, ec, latest);
        std::vector<std::pair<std::shared_ptr<lease_core>, std::error_code>> lost;
        std::vector<std::pair<std::shared_ptr<lease_core>, reply>> reply_errors;  // e.g. OOM, WRONGTYPE
        {
            std::lock_guard lock(registry_mutex_);
            for (std::size_t i = 0; i < due.size(); ++i) {
                auto& lease = due[i].lease;
                const auto it = registry_.find(lease.get());
                if (it == registry_.end()) continue;  // released meanwhile
                if (!ec && replies[i].type == reply::kind::integer && replies[i].integer == 1) {
                    lease->renewed(dlock::detail::valid_until(sent, due[i].request));
                    it->second.next_renewal = std::min(
                        dlock::detail::next_renewal_at(lease->plan(), lease->granted_at(), sent), lease->valid_until());
                } else if (!ec && replies[i].type == reply::kind::integer) {
                    lost.emplace_back(lease, make_error_code(errc::lock_lost));  // gone or another token
                    registry_.erase(it);
                } else {
                    if (!ec) reply_errors.emplace_back(lease, replies[i]);
                    lease->renewal_failed();
                    const auto retry = now + dlock::detail::renewal_retry_delay(lease->plan());
                    it->second.next_renewal = std::min(retry, lease->valid_until());
                }
            }
        }
        for (const auto& d : due) {
            if (!ec && d.lease->state(steady::now()) == lock_state::held) {
                notify({event_kind::renewed, d.lease->name(), d.lease->fencing_token(), {}, steady::now()});
            }
        }
        if (ec) {
            report_error(ec, "lease renewal failed: " + dlock::detail::message_for(ec));
            for (const auto& d : due) notify({event_kind::error, d.lease->name(), d.lease->fencing_token(), ec, steady::now()});
        }
        for (const auto& [lease, r] : reply_errors) {
            std::error_code reply_ec;
            script_error({&renew_script(), {key(lease->name())}, {}}, r, *renew_conn_, reply_ec);
            report_error(reply_ec, "renewal of \"" + lease->name() + "\": " + dlock::detail::message_for(reply_ec));
            notify({event_kind::error, lease->name(), lease->fencing_token(), reply_ec, steady::now()});
        }
        for (auto& [lease, why] : lost) lease->lose(why);
    }
    std::lock_guard lock(registry_mutex_);
    auto next = steady::time_point::max();
    for (const auto& [ptr, t] : registry_) next = std::min(next, t.next_renewal);
    // Published under registry_mutex_: a lease tracked after this sees it and wakes us if sooner.
    worker_wakes_at_.store(next.time_since_epoch().count());
    return next;
}

void client::impl::run(std::stop_token stop) {
    while (!stop.stop_requested()) {
        const auto now = steady::now();
        auto next = renew_due(now);
        const int sub_fd = subscriber_->service(steady::now());
        next = std::min(next, subscriber_->next_retry());

        pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {sub_fd, POLLIN, 0}};
        int timeout_ms = -1;
        if (next != steady::time_point::max()) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - steady::now()).count();
            timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
        }
        const int n = ::poll(fds, sub_fd >= 0 ? 2 : 1, timeout_ms);
        worker_wakes_at_.store(steady::time_point::min().time_since_epoch().count());
        if (n <= 0) continue;
        if (fds[0].revents & POLLIN) {
            std::uint64_t count = 0;
            [[maybe_unused]] const auto r = ::read(wake_fd_, &count, sizeof count);
        }
        if (sub_fd >= 0 && fds[1].revents != 0) subscriber_->on_readable();
    }
}

// --- client ---

client::client(client_options options) : impl_(std::make_shared<impl>(std::move(options))) { impl_->start(); }
client::client(client&&) noexcept = default;
client& client::operator=(client&& other) noexcept {
    if (this != &other) {
        if (impl_) impl_->stop();
        impl_ = std::move(other.impl_);
    }
    return *this;
}
client::~client() {
    if (impl_) impl_->stop();
}

lease client::acquire_until(std::string_view name, const lock_options& options, steady::time_point deadline,
                            std::error_code& ec) noexcept {
    if (!impl_) {
        fail(ec, errc::invalid_argument, "acquire on a moved-from client");
        return {};
    }
    return impl_->acquire_until(name, options, deadline, ec);
}

reply client::command(const std::vector<std::string>& args) {
    std::error_code ec;
    auto r = command(args, ec);
    dlock::detail::throw_if(ec);
    return r;
}

reply client::command(const std::vector<std::string>& args, std::error_code& ec) noexcept {
    if (!impl_) {
        fail(ec, errc::invalid_argument, "command on a moved-from client");
        return {};
    }
    return impl_->command(args, ec);
}

void client::ping() {
    const auto r = command({"PING"});
    if (r.type != reply::kind::status || r.text != "PONG") {
        throw error(errc::unexpected_reply, "PING answered " + std::string(to_string(r.type)) + " \"" + r.text + "\"");
    }
}

std::string client::lock_key(std::string_view name) const { return impl_->key(name); }
std::string client::fence_key(std::string_view name) const { return impl_->fence(name); }
std::string client::release_channel(std::string_view name) const { return impl_->channel(name); }

const char* to_string(reply::kind kind) noexcept {
    switch (kind) {
        case reply::kind::nil: return "nil";
        case reply::kind::integer: return "integer";
        case reply::kind::string: return "string";
        case reply::kind::status: return "status";
        case reply::kind::error: return "error";
        case reply::kind::array: return "array";
    }
    return "unknown";
}

}  // namespace dlock::redis
