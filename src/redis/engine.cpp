#include "redis/engine.hpp"

#include <dlock/redis/client.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <exception>

#include "core/callbacks.hpp"
#include "core/status.hpp"
#include "core/token.hpp"
#include "core/validate.hpp"

namespace dlock::redis::detail {

using dlock::detail::deadline_after;
using dlock::detail::fail;
using dlock::detail::lease_core;

namespace {

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()); }

/// The reply of the acquire script: {1, fencing token} or {0, holder's remaining ms}.
/// One call, shared by every server's batch.
std::shared_ptr<const std::vector<script_call>> one_call(script_call call) {
    return std::make_shared<const std::vector<script_call>>(1, std::move(call));
}

bool is_acquire_reply(const reply& r) noexcept {
    return r.type == reply::kind::array && r.elements.size() == 2 &&
           r.elements[0].type == reply::kind::integer && r.elements[1].type == reply::kind::integer;
}

}  // namespace

struct engine::server {
    connection_settings commands;
    connection_settings renewals;
    std::mutex pool_mutex;  // guards idle
    std::vector<std::unique_ptr<connection>> idle;
    std::unique_ptr<connection> renew_conn;  // background thread only
};

engine::pooled::pooled(server& s) : server_(&s) {
    {
        std::lock_guard lock(s.pool_mutex);
        if (!s.idle.empty()) {
            conn_ = std::move(s.idle.back());
            s.idle.pop_back();
            return;
        }
    }
    conn_ = std::make_unique<connection>(s.commands);
}

engine::pooled::~pooled() {
    if (!conn_) return;
    constexpr std::size_t max_idle = 32;  // beyond this, a burst's extra connections are closed
    std::lock_guard lock(server_->pool_mutex);
    if (server_->idle.size() < max_idle) server_->idle.push_back(std::move(conn_));
}

struct engine::attempt_outcome {
    bool granted = false;
    std::uint64_t fencing_token = 0;
    std::size_t granting = 0;     // servers whose SET NX succeeded
    std::size_t holding = 0;      // servers where someone else holds the lock
    std::int64_t holder_ms = -1;  // smallest remaining lease among holding servers; -1 unknown
    std::error_code error;        // the first failure (all of it when there is one server)
    std::string failures;         // every failed server and why
};

engine::engine(engine_config config) : config_(std::move(config)) {
    const auto positive = [](std::chrono::milliseconds d, const char* field) {
        if (d <= std::chrono::milliseconds::zero()) {
            throw error(errc::invalid_argument, std::string("client_options.") + field +
                                                    " must be > 0, got " + ms_text(d) + "ms");
        }
    };
    positive(config_.connect_timeout, "connect_timeout");
    positive(config_.command_timeout, "command_timeout");
    if (config_.node_timeout) positive(*config_.node_timeout, "node_timeout");
    if (!(config_.drift.ratio >= 0.0 && config_.drift.ratio < 0.5) ||
        config_.drift.floor < std::chrono::milliseconds::zero()) {
        throw error(errc::invalid_argument,
                    "client_options.drift_ratio must be in [0, 0.5) and drift_floor >= 0, got " +
                        std::to_string(config_.drift.ratio) + " and " +
                        ms_text(config_.drift.floor) + "ms");
    }
    if (config_.key_prefix.empty() || config_.key_prefix.find_first_of("{}") != std::string::npos) {
        throw error(errc::invalid_argument, "client_options.key_prefix \"" + config_.key_prefix +
                                                "\" must be non-empty and free of '{' '}'");
    }
    if (config_.servers.empty())
        throw error(errc::invalid_argument, "client_options: no servers given");
    std::vector<connection_settings> subscriber_settings;
    for (std::size_t i = 0; i < config_.servers.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            // The same server twice would vote twice: a "majority" that is not one.
            if (config_.servers[i].describe() == config_.servers[j].describe() &&
                config_.servers[i].db == config_.servers[j].db) {
                throw error(errc::invalid_argument, "client_options: server " +
                                                        config_.servers[i].describe() +
                                                        " is listed more than once");
            }
        }
    }
    for (const auto& endpoint : config_.servers) {
        std::error_code ec;
        make_transport(endpoint, ec);  // refuses rediss:// up front, with its reason
        dlock::detail::throw_if(ec);
        auto s = std::make_unique<server>();
        s->commands = {endpoint, config_.connect_timeout, config_.command_timeout, "dlock:cmd"};
        s->renewals = {endpoint, config_.connect_timeout, config_.command_timeout, "dlock:renew"};
        s->renew_conn = std::make_unique<connection>(s->renewals);
        subscriber_settings.push_back(
            {endpoint, config_.connect_timeout, config_.command_timeout, "dlock:sub"});
        servers_.push_back(std::move(s));
    }
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
    subscriber_ = std::make_unique<subscriber>(std::move(subscriber_settings), [this] { wake(); });
}

engine::~engine() { stop(); }

void engine::start() {
    worker_ = std::jthread([this](std::stop_token st) { run(st); });
}

void engine::stop() noexcept {
    if (forked()) {
        // A forked child's copy: the background thread runs only in the parent (its handle must be
        // neither joined nor detached here), and the leases are the parent's, inert here. Only
        // the child's copies of the descriptors are closed (by the members' destructors).
        if (worker_.joinable())
            dlock::detail::keep_forever(std::make_shared<std::jthread>(std::move(worker_)));
        if (wake_fd_ >= 0) ::close(wake_fd_);
        wake_fd_ = -1;
        return;
    }
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

void engine::wake() noexcept {
    if (wake_fd_ < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
}

void engine::report_error(std::error_code ec, std::string_view what) noexcept {
    dlock::detail::report_to(config_.error_handler, ec, what);
}

void engine::notify(const lock_event& event) noexcept {
    dlock::detail::notify_observer(config_.observer, config_.error_handler, event);
}

reply engine::command(const std::vector<std::string>& args, std::error_code& ec) noexcept {
    ec.clear();
    try {
        if (args.empty()) {
            fail(ec, errc::invalid_argument, "command: no arguments");
            return {};
        }
        pooled conn(*servers_.front());
        const command_args view(args.begin(), args.end());
        return conn.get()->execute(view, ec);
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return {};
    }
}

void engine::set_permits(std::string_view name, std::uint32_t permits,
                         std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return;
        if (permits < 1) {
            fail(ec, errc::invalid_argument,
                 "semaphore \"" + std::string(name) + "\": permits must be >= 1, got 0");
            return;
        }
        const auto* protocol = protocol_for(lock_kind::permits);
        const auto* script = find_script("semaphore_set_permits");
        if (!protocol || !script || servers_.size() > 1) {
            fail(ec, errc::unsupported,
                 "semaphore \"" + std::string(name) + "\": not available " +
                     (servers_.size() > 1 ? "on Redlock" : "in this build"));
            return;
        }
        pooled conn(*servers_.front());
        // The same KEYS as the semaphore's other scripts: one hash slot, one layout.
        const script_call call{
            script, keys(*protocol, name), {std::to_string(permits), channel(name)}};
        const auto r = run_script(*conn.get(), call, ec);
        if (!ec && r.type != reply::kind::integer) script_error(call, r, *conn.get(), ec);
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    }
}

std::chrono::milliseconds engine::node_timeout_for(std::chrono::milliseconds lease) const noexcept {
    if (config_.node_timeout) return *config_.node_timeout;
    return std::clamp(lease / 200, std::chrono::milliseconds(5), std::chrono::milliseconds(50));
}

std::vector<std::string> engine::keys(const lock_protocol& protocol, std::string_view name) const {
    std::vector<std::string> out;
    out.reserve(1 + protocol.key_suffixes.size());
    out.push_back(key(name));
    for (const auto suffix : protocol.key_suffixes)
        out.push_back(out.front() + std::string(suffix));
    return out;
}

engine::attempt_outcome engine::attempt(const lock_protocol& protocol, std::string_view name,
                                        const std::string& token, std::chrono::milliseconds lease,
                                        const lock_request& request,
                                        std::chrono::milliseconds node_timeout) {
    const auto sent = steady::now();
    const bool single = servers_.size() == 1;
    std::vector<pooled> conns;
    std::vector<script_batch> batches;
    conns.reserve(servers_.size());
    batches.reserve(servers_.size());
    const auto call = one_call(
        {protocol.acquire,
         keys(protocol, name),
         {token, ms_text(lease), std::to_string(request.count), std::to_string(request.limit),
          ms_text(waiter_liveness), channel(name), request.reenter ? "1" : "0"}});
    for (auto& s : servers_) {
        conns.emplace_back(*s);
        auto* conn = conns.back().get();
        // One server: its own timeouts. Several: each gets node_timeout, far below the lease, so a
        // dead or slow server costs only that (docs/redlock.md).
        const auto deadline =
            single ? conn->default_deadline() : deadline_after(sent, node_timeout);
        batches.push_back({conn, call, deadline});
    }
    run_everywhere(batches);

    attempt_outcome out;
    std::vector<std::int64_t> counters(servers_.size(), -1);
    for (std::size_t i = 0; i < batches.size(); ++i) {
        auto& b = batches[i];
        if (!b.ec && !is_acquire_reply(b.replies.front()))
            script_error(b.calls->front(), b.replies.front(), *b.conn, b.ec);
        if (b.ec) {
            if (b.error.empty()) b.error = dlock::detail::message_for(b.ec);
            if (!out.error) out.error = b.ec;
            out.failures += (out.failures.empty() ? "" : "; ") + b.error;
            continue;
        }
        const auto& r = b.replies.front();
        if (r.elements[0].integer == 1) {
            ++out.granting;
            counters[i] = r.elements[1].integer;
        } else {
            ++out.holding;
            const auto ttl = r.elements[1].integer;
            if (ttl >= 0 && (out.holder_ms < 0 || ttl < out.holder_ms)) out.holder_ms = ttl;
        }
    }
    if (out.granting >= quorum()) {
        const auto token_value = *std::max_element(counters.begin(), counters.end());
        auto at_token =
            static_cast<std::size_t>(std::count(counters.begin(), counters.end(), token_value));
        if (at_token < quorum()) {
            // Fencing write-back: the grant counts only once a quorum holds a counter >= token
            // (docs/redlock.md, "Fencing tokens across independent counters").
            std::vector<script_batch> raises;
            const auto raise = one_call({&raise_fence_script(),
                                         {key(name), fence(name)},
                                         {token, std::to_string(token_value)}});
            for (std::size_t i = 0; i < servers_.size(); ++i) {
                if (counters[i] == token_value) continue;
                raises.push_back(
                    {batches[i].conn, raise, deadline_after(steady::now(), node_timeout)});
            }
            run_everywhere(raises);
            for (const auto& r : raises) {
                if (!r.ec && r.replies.front().type == reply::kind::integer &&
                    r.replies.front().integer == 1)
                    ++at_token;
            }
        }
        const bool valid = steady::now() < dlock::detail::valid_until(sent, lease, config_.drift);
        if (at_token >= quorum() && valid) {
            out.granted = true;
            out.fencing_token = static_cast<std::uint64_t>(token_value);
            return out;
        }
    }
    // Not granted: undo whatever landed, on every server, including those that did not answer
    // (their SET may have arrived after our deadline). Compare-and-delete touches only our token.
    // A re-entry that failed holds nothing of its own; a queued waiter leaves through leave_queue.
    if ((out.granting > 0 || !out.failures.empty()) && !request.reenter && !protocol.queued)
        release_everywhere(protocol, name, token, node_timeout);
    return out;
}

void engine::leave_queue(const lock_protocol& protocol, std::string_view name,
                         const std::string& token) noexcept {
    try {
        pooled conn(*servers_.front());
        std::error_code ec;
        const auto r = run_script(
            *conn.get(),
            {protocol.leave, keys(protocol, name), {token, channel(name), ms_text(handoff_lease)}},
            ec);
        if (ec) {
            report_error(ec, "leaving the queue of \"" + std::string(name) +
                                 "\" failed; the entry expires with its liveness deadline: " +
                                 dlock::detail::message_for(ec));
        }
    } catch (...) {
        // Out of memory: the queue entry expires with its liveness deadline.
    }
}

void engine::release_everywhere(const lock_protocol& protocol, std::string_view name,
                                const std::string& token, std::chrono::milliseconds node_timeout) {
    std::vector<pooled> conns;
    std::vector<script_batch> batches;
    const auto deadline = deadline_after(
        steady::now(), servers_.size() == 1 ? config_.command_timeout : node_timeout);
    const auto call = one_call(
        {protocol.release, keys(protocol, name), {token, channel(name), ms_text(handoff_lease)}});
    for (auto& s : servers_) {
        conns.emplace_back(*s);
        batches.push_back({conns.back().get(), call, deadline});
    }
    run_everywhere(batches);
}

dlock::lease engine::grant(std::string_view name, const std::string& token, std::uint64_t fence,
                           const lock_options& options, lock_kind kind, steady::time_point sent,
                           steady::time_point valid_until, bool handed_off) {
    auto core = std::make_shared<lease_core>(shared_from_this(), std::string(name), token, fence,
                                             options, sent, valid_until, kind);
    track(core, handed_off);
    notify({event_kind::acquired, name, fence, {}, steady::now()});
    return dlock::detail::lease_access::make(std::move(core));
}

dlock::lease engine::reenter(const lock_protocol& protocol, std::string_view name,
                             const lease& held, const lock_options& options, std::error_code& ec) {
    const auto* core = dlock::detail::lease_access::core(held);
    if (!core || &core->owner() != this || core->name() != name ||
        core->kind() != lock_kind::reentrant) {
        fail(ec, errc::invalid_argument,
             "lock_request.reenter of \"" + std::string(name) +
                 "\" must be a reentrant lease of the same lock from the same client");
        return {};
    }
    const auto plan = dlock::detail::make_renewal_plan(options);
    const auto sent = steady::now();
    const auto lease_ms = *dlock::detail::lease_to_request(plan, sent, sent);
    lock_request request;
    request.kind = lock_kind::reentrant;
    request.reenter = &held;
    const auto result =
        attempt(protocol, name, core->token(), lease_ms, request, node_timeout_for(lease_ms));
    if (result.granted) {
        return grant(name, core->token(), result.fencing_token, options, lock_kind::reentrant, sent,
                     dlock::detail::valid_until(sent, lease_ms, config_.drift), false);
    }
    if (result.error) {
        fail(ec, result.error, result.failures);
    } else {
        fail(ec, errc::lock_lost,
             "re-entering \"" + std::string(name) + "\": this owner no longer holds it");
    }
    return {};
}

dlock::lease engine::acquire_until(std::string_view name, const lock_request& request,
                                   const lock_options& options, steady::time_point deadline,
                                   std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (!ec) dlock::detail::validate_lock_options(options, ec);
        if (ec) return {};
        const auto* protocol = protocol_for(request.kind);
        if (!protocol || (request.kind != lock_kind::exclusive && servers_.size() > 1)) {
            fail(ec, errc::unsupported,
                 std::string("lock \"") + std::string(name) + "\": the " + to_string(request.kind) +
                     " lock kind is not available " +
                     (servers_.size() > 1 ? "on Redlock (only dlock::mutex is)" : "in this build"));
            return {};
        }
        if (request.kind == lock_kind::permits &&
            (request.count < 1 || request.limit < request.count)) {
            fail(ec, errc::invalid_argument,
                 "semaphore \"" + std::string(name) + "\": lock_request.count (" +
                     std::to_string(request.count) + ") must be >= 1 and <= limit (" +
                     std::to_string(request.limit) + ")");
            return {};
        }
        if (request.reenter) {
            if (request.kind != lock_kind::reentrant) {
                fail(ec, errc::invalid_argument,
                     "lock_request.reenter is only for the reentrant kind");
                return {};
            }
            return reenter(*protocol, name, *request.reenter, options, ec);
        }
        const auto plan = dlock::detail::make_renewal_plan(options);
        const auto node_timeout = node_timeout_for(options.lease);
        std::optional<subscriber::registration> waiting;
        unsigned attempts = 0;
        // A queued waiter keeps one token: it is its place in the queue and its hand-off channel.
        std::string token = dlock::detail::random_token();
        const auto handoff_channel = channel(name) + ":" + token;
        bool enqueued = false;
        auto refreshed_at = steady::time_point::min();  // send time of the last "not yet" reply
        const auto give_up = [&](std::error_code code, const std::string& why) {
            if (enqueued) leave_queue(*protocol, name, token);
            fail(ec, code, why);
            return dlock::lease{};
        };
        for (;;) {
            // Read the generation BEFORE the attempt: a release after a failed attempt bumps it.
            const auto seen = waiting ? waiting->generation() : 0;
            if (!protocol->queued && attempts > 0) token = dlock::detail::random_token();
            const auto sent = steady::now();
            const auto lease_ms = *dlock::detail::lease_to_request(plan, sent, sent);
            if (options.cancel.stop_requested()) {
                return give_up(make_error_code(errc::canceled),
                               "waiting for lock \"" + std::string(name) + "\" was canceled");
            }
            const auto result = attempt(*protocol, name, token, lease_ms, request, node_timeout);
            ++attempts;
            if (result.granted) {
                return grant(name, token, result.fencing_token, options, request.kind, sent,
                             dlock::detail::valid_until(sent, lease_ms, config_.drift), false);
            }
            if (result.granting + result.holding < quorum()) {
                // Not contention: too few servers answered for any quorum.
                std::error_code code = result.error;
                std::string why = result.failures;
                if (servers_.size() > 1) {
                    code = make_error_code(errc::quorum_unreachable);
                    why = "lock \"" + std::string(name) + "\": no quorum (" +
                          std::to_string(quorum()) + " of " + std::to_string(servers_.size()) +
                          ") could be reached: " + result.failures;
                }
                give_up(code, why);
                notify({event_kind::error, name, 0, ec, steady::now()});
                return {};
            }
            if (protocol->queued) {
                enqueued = true;
                refreshed_at = sent;
            }
            auto now = steady::now();
            if (options.max_attempts && attempts >= *options.max_attempts) {
                return give_up(make_error_code(errc::attempts_exhausted),
                               "lock \"" + std::string(name) + "\" still held after " +
                                   std::to_string(attempts) + " attempts");
            }
            if (now >= deadline) {
                return give_up(make_error_code(errc::timeout),
                               "lock \"" + std::string(name) + "\" is held by someone else");
            }
            if (!waiting) {
                // Register for the release (or hand-off) notification, then attempt again at
                // once: a release between the first attempt and the subscription is caught by
                // that attempt.
                notify({event_kind::wait_started, name, 0, {}, now});
                waiting.emplace(*subscriber_, protocol->queued ? handoff_channel : channel(name));
                waiting->wait_subscribed(
                    std::min(deadline, deadline_after(now, config_.command_timeout)),
                    options.cancel);
                continue;
            }
            // Pub/sub is lossy and a crashed holder sends nothing: the holder's remaining lease
            // bounds the sleep. Unknown expiry (a key set without one): re-check after our lease.
            // A queued waiter also refreshes its liveness on time (that refresh is the bounded
            // re-check for a missed hand-off).
            auto fallback =
                result.holder_ms >= 0 ? std::chrono::milliseconds(result.holder_ms) : lease_ms;
            if (protocol->queued) fallback = std::min(fallback, waiter_liveness / 3);
            auto retry_at = deadline_after(now, fallback) +
                            std::chrono::nanoseconds(dlock::detail::random_jitter_ns(2'000'000));
            if (result.granting > 0) {
                // A split vote between contenders: retry after a random delay so they do not
                // split again in lock step.
                const auto spread =
                    std::chrono::duration_cast<std::chrono::nanoseconds>(2 * node_timeout).count();
                retry_at = std::min(retry_at, now + std::chrono::nanoseconds(
                                                        dlock::detail::random_jitter_ns(spread)));
            }
            waiting->wait(seen, std::min(deadline, retry_at), options.cancel);
            if (protocol->queued) {
                // Direct hand-off: the releaser made us the owner and told us the fencing token,
                // so no round trip is needed. The grant happened after the server answered our
                // last refresh "not yet", so its lease counts from that refresh's send time.
                const auto message = waiting->last_message();
                constexpr std::string_view granted = "granted ";
                if (message.starts_with(granted)) {
                    const auto fence = std::stoull(message.substr(granted.size()));
                    return grant(
                        name, token, fence, options, request.kind, refreshed_at,
                        dlock::detail::valid_until(refreshed_at, handoff_lease, config_.drift),
                        true);
                }
            }
        }
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    } catch (const std::system_error& e) {
        fail(ec, e.code(), e.what());
    } catch (const std::exception& e) {
        fail(ec, errc::protocol_error, e.what());  // a malformed hand-off message
    }
    return {};
}

void engine::release(lease_core& lease, std::error_code& ec) noexcept {
    ec.clear();
    {
        std::lock_guard lock(registry_mutex_);
        registry_.erase(&lease);
    }
    try {
        std::vector<pooled> conns;
        std::vector<script_batch> batches;
        // With several servers a paused one must not hold up unlock(): it gets node_timeout, and
        // our key there simply expires.
        const auto redlock_deadline =
            deadline_after(steady::now(), node_timeout_for(lease.plan().lease));
        const auto* protocol = protocol_for(lease.kind());
        const auto call =
            one_call({protocol->release,
                      keys(*protocol, lease.name()),
                      {lease.token(), channel(lease.name()), ms_text(handoff_lease)}});
        for (auto& s : servers_) {
            conns.emplace_back(*s);
            auto* conn = conns.back().get();
            batches.push_back(
                {conn, call, servers_.size() == 1 ? conn->default_deadline() : redlock_deadline});
        }
        run_everywhere(batches);
        lease.mark_released();
        std::size_t deleted = 0;
        std::string failures;
        for (auto& b : batches) {
            if (!b.ec && b.replies.front().type != reply::kind::integer) {
                script_error(b.calls->front(), b.replies.front(), *b.conn, b.ec);
                b.error = dlock::detail::message_for(b.ec);
            }
            if (b.ec) {
                if (!ec) ec = b.ec;
                failures += (failures.empty() ? "" : "; ") + b.error;
            } else if (b.replies.front().integer == 1) {
                ++deleted;
            }
        }
        if (deleted > 0) {
            // Servers that could not be reached keep our key until it expires; nobody else is hurt.
            ec.clear();
            notify({event_kind::released, lease.name(), lease.fencing_token(), {}, steady::now()});
            return;
        }
        if (ec) {
            if (servers_.size() == 1)
                fail(ec, ec, failures);
            else
                fail(ec, errc::quorum_unreachable,
                     "release of \"" + lease.name() + "\" reached no server: " + failures);
        } else {
            fail(ec, errc::lock_lost,
                 "lock \"" + lease.name() +
                     "\" was no longer held by this owner (expired or taken over)");
        }
        notify({event_kind::error, lease.name(), lease.fencing_token(), ec, steady::now()});
    } catch (...) {
        lease.mark_released();
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "release: out of memory");
    }
}

void engine::track(const std::shared_ptr<lease_core>& lease, bool handed_off) {
    auto next = std::min(
        dlock::detail::next_renewal_at(lease->plan(), lease->granted_at(), lease->granted_at()),
        lease->valid_until());
    // A hand-off grant carries the short hand-off lease: extend it to the owner's own lease soon,
    // but not on the hand-off's critical path (a short critical section releases before that).
    if (handed_off) next = std::min(next, steady::now() + handoff_lease / 4);
    {
        std::lock_guard lock(registry_mutex_);
        registry_[lease.get()] = {lease, next, handed_off};
    }
    // Only wake the background thread if it would otherwise sleep past this lease's first due time.
    if (next.time_since_epoch().count() < worker_wakes_at_.load()) wake();
}

steady::time_point engine::renew_due(steady::time_point now) {
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
                const auto request =
                    dlock::detail::lease_to_request(lease->plan(), lease->granted_at(), now);
                if (request && (lease->plan().renew || it->second.extend_once)) {
                    due.push_back({std::move(lease), *request});
                } else {
                    it->second.next_renewal =
                        lease->valid_until();  // max_hold reached: let it run out
                }
            }
            ++it;
        }
    }
    for (auto& lease : expired) lease->lose(make_error_code(errc::lock_lost));
    if (!due.empty()) {
        const auto sent = steady::now();
        // Never block past the earliest lease deadline in the batch: its loss must be reported on
        // time.
        auto latest = steady::time_point::max();
        for (const auto& d : due) latest = std::min(latest, d.lease->valid_until());
        auto calls = std::make_shared<std::vector<script_call>>();
        calls->reserve(due.size());
        for (const auto& d : due) {
            const auto* protocol = protocol_for(d.lease->kind());
            calls->push_back({protocol->renew,
                              keys(*protocol, d.lease->name()),
                              {d.lease->token(), ms_text(d.request)}});
        }
        std::vector<script_batch> batches;
        for (auto& s : servers_) {
            batches.push_back(
                {s->renew_conn.get(), calls, std::min(s->renew_conn->default_deadline(), latest)});
        }
        run_everywhere(batches);
        std::string failures;
        for (const auto& b : batches) {
            if (b.ec) failures += (failures.empty() ? "" : "; ") + b.error;
        }
        std::vector<std::shared_ptr<lease_core>> lost, renewed;
        std::vector<std::pair<std::shared_ptr<lease_core>, std::string>> failed;  // lease, why
        {
            std::lock_guard lock(registry_mutex_);
            for (std::size_t i = 0; i < due.size(); ++i) {
                auto& lease = due[i].lease;
                const auto it = registry_.find(lease.get());
                if (it == registry_.end()) continue;  // released meanwhile
                std::size_t extended = 0, not_ours = 0;
                std::string why = failures;
                for (const auto& b : batches) {
                    if (b.ec) continue;
                    const auto& r = b.replies[i];
                    if (r.type != reply::kind::integer) {  // e.g. OOM, WRONGTYPE: counts as failed
                        why += (why.empty() ? "" : "; ") + b.conn->settings().endpoint.describe() +
                               ": " + r.text;
                        continue;
                    }
                    (r.integer == 1 ? extended : not_ours) += 1;
                }
                if (extended >= quorum()) {
                    it->second.extend_once = false;
                    lease->renewed(dlock::detail::valid_until(sent, due[i].request, config_.drift));
                    it->second.next_renewal = std::min(
                        dlock::detail::next_renewal_at(lease->plan(), lease->granted_at(), sent),
                        lease->valid_until());
                    renewed.push_back(lease);
                } else if (not_ours > servers_.size() - quorum()) {
                    lost.push_back(
                        lease);  // gone or another token on enough servers: no quorum can hold it
                    registry_.erase(it);
                } else {
                    lease->renewal_failed();
                    const auto retry = now + dlock::detail::renewal_retry_delay(lease->plan());
                    it->second.next_renewal = std::min(retry, lease->valid_until());
                    failed.emplace_back(lease, std::move(why));
                }
            }
        }
        for (const auto& lease : renewed) {
            notify({event_kind::renewed, lease->name(), lease->fencing_token(), {}, steady::now()});
        }
        for (const auto& [lease, why] : failed) {
            const auto code = servers_.size() > 1  ? make_error_code(errc::quorum_unreachable)
                              : batches.front().ec ? batches.front().ec
                                                   : make_error_code(errc::server_error);
            report_error(code, "renewal of \"" + lease->name() +
                                   "\" failed; retrying until its lease runs out: " + why);
            notify({event_kind::error, lease->name(), lease->fencing_token(), code, steady::now()});
        }
        for (auto& lease : lost) lease->lose(make_error_code(errc::lock_lost));
    }
    std::lock_guard lock(registry_mutex_);
    auto next = steady::time_point::max();
    for (const auto& [ptr, t] : registry_) next = std::min(next, t.next_renewal);
    // Published under registry_mutex_: a lease tracked after this sees it and wakes us if sooner.
    worker_wakes_at_.store(next.time_since_epoch().count());
    return next;
}

void engine::run(std::stop_token stop) {
    while (!stop.stop_requested()) {
        auto next = renew_due(steady::now());
        const int sub_fd = subscriber_->service(steady::now(), next);
        next = std::min(next, subscriber_->next_retry());

        pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {sub_fd, POLLIN, 0}};
        int timeout_ms = -1;
        if (next != steady::time_point::max()) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(next - steady::now()).count();
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

}  // namespace dlock::redis::detail
