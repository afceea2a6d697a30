#include "redis/engine.hpp"

#include <dlock/redis/client.hpp>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <thread>
#include <exception>

#include "core/acquire_policy.hpp"
#include "core/callbacks.hpp"
#include "core/inspect.hpp"
#include "core/quorum.hpp"
#include "core/status.hpp"
#include "core/token.hpp"
#include "core/validate.hpp"
#include "redis/inspect.hpp"
#include "redis/waiter.hpp"
#include "redis/watch.hpp"

namespace dlock::redis::detail {

using dlock::detail::deadline_after;
using dlock::detail::fail;
using dlock::detail::lease_core;
namespace quorum = dlock::detail::quorum;

namespace {

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()); }

/// Appends one server's failure to a message listing several ("a; b").
void add_failure(std::string& all, const std::string& one) {
    all += (all.empty() ? "" : "; ") + one;
}

/// One call, shared by every server's batch.
std::shared_ptr<const std::vector<script_call>> one_call(const script_call& call) {
    return std::make_shared<const std::vector<script_call>>(1, call);
}

/// The reply of an acquire script: {1, fencing token} or {0, holder's remaining ms}, and for a
/// queued kind's waiter {0, ms, ticket}.
bool is_acquire_reply(const reply& r) noexcept {
    return r.type == reply::kind::array && r.elements.size() >= 2 && r.elements.size() <= 4 &&
           std::all_of(r.elements.begin(), r.elements.end(),
                       [](const reply& e) { return e.type == reply::kind::integer; });
}

}  // namespace

/// The background thread of an active client (see wake_by) sleeps at most active_tick at a time,
/// for active_window after the last lock activity; then only until its next due work. The tick
/// must stay well below the earliest work it lets go without a wake-up: a hand-off grant's
/// extension (handoff_lease / 4) and a channel's linger (2 s); shorter due times still wake.
constexpr std::chrono::milliseconds active_tick{200};
constexpr std::chrono::seconds active_window{5};
static_assert(active_tick < handoff_lease / 4);

/// One voting member of the quorum: how it is reached is its node's business (node.hpp); whether
/// its answers count is the engine's (check_identities).
struct engine::voter {
    std::shared_ptr<redis::detail::node> at;
    std::atomic<bool> verified{false};  // its votes count (see engine::counts)
    /// What the server says it is (INFO run_id), once verified. The engine's identity_mutex_
    /// guards it; a nested type cannot name that in DLOCK_GUARDED_BY, hence the accessor.
    std::string& run_id([[maybe_unused]] const dlock::detail::mutex& m) DLOCK_REQUIRES(m) {
        return run_id_;
    }

private:
    std::string run_id_;
};

struct engine::attempt_outcome {
    bool granted = false;
    std::uint64_t fencing_token = 0;
    std::size_t granting = 0;     // servers whose SET NX succeeded
    std::size_t holding = 0;      // servers where someone else holds the lock
    std::int64_t holder_ms = -1;  // smallest remaining lease among holding servers; -1 unknown
    std::uint64_t ticket = 0;     // queued kinds: our queue entry's ticket (0: none reported)
    // Several servers: each one's ticket where it answered "held" with one (else 0), and whether
    // the attempt was undone on every server (which takes a registered waiter's entries too).
    std::vector<std::uint64_t> node_tickets;
    bool undone = false;
    // A semaphore whose number of permits on the server is not the request's limit: that number
    // (semaphore_acquire.lua's 4-element reply); 0 when they agree.
    std::int64_t recorded_limit = 0;
    std::error_code error;  // the first failure (all of it when there is one server)
    std::string failures;   // every failed server and why
};

engine::engine(engine_config config)
    : config_(std::move(config)), client_tag_(dlock::detail::random_token()) {
    const auto positive = [](std::chrono::milliseconds d, const char* field) {
        if (d <= std::chrono::milliseconds::zero()) {
            throw error(errc::invalid_argument, std::string("client_options.") + field +
                                                    " must be > 0, got " + ms_text(d) + "ms");
        }
    };
    positive(config_.connect_timeout, "connect_timeout");
    positive(config_.command_timeout, "command_timeout");
    positive(config_.idle_expiry, "idle_expiry");
    if (config_.node_timeout) positive(*config_.node_timeout, "node_timeout");
    if (!(config_.drift.ratio >= 0.0 && config_.drift.ratio < 0.5) ||
        config_.drift.floor < std::chrono::milliseconds::zero()) {
        throw error(errc::invalid_argument,
                    "client_options.drift_ratio must be in [0, 0.5) and drift_floor >= 0, got " +
                        std::to_string(config_.drift.ratio) + " and " +
                        ms_text(config_.drift.floor) + "ms");
    }
    if (config_.key_prefix.empty() || config_.key_prefix.find_first_of("{}") != std::string::npos) {
        throw error(errc::invalid_argument, "key prefix \"" + config_.key_prefix +
                                                "\" must be non-empty and free of '{' '}'");
    }
    if (config_.servers.empty())
        throw error(errc::invalid_argument, "client_options: no servers given");
    std::vector<std::shared_ptr<node>> nodes;
    for (std::size_t i = 0; i < config_.servers.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            // The same server twice would vote twice: a "majority" that is not one.
            if (config_.servers[i].describe() == config_.servers[j].describe()) {
                throw error(errc::invalid_argument, "client_options: server " +
                                                        config_.servers[i].describe() +
                                                        " is listed more than once");
            }
        }
    }
    if (config_.resolver && config_.servers.size() != 1)
        throw error(errc::invalid_argument, "client_options: Sentinel takes one master");
    if (config_.wait_replicas > 0 && config_.wait_timeout <= std::chrono::milliseconds::zero()) {
        throw error(errc::invalid_argument,
                    "client_options.wait_replicas needs wait_timeout > 0, got " +
                        ms_text(config_.wait_timeout) + "ms");
    }
    if (config_.wait_aof && config_.wait_replicas == 0)
        throw error(errc::invalid_argument, "client_options.wait_aof needs wait_replicas > 0");
    for (const auto& endpoint : config_.servers) {
        std::error_code ec;
        make_transport(endpoint, ec);  // TLS files are loaded up front: a bad one fails here
        dlock::detail::throw_if(ec);
        auto s = std::make_unique<voter>();
        s->at = std::make_shared<node>(config_.address_source_for
                                           ? config_.address_source_for(endpoint)
                                           : std::make_unique<fixed_address>(endpoint),
                                       config_.connect_timeout, config_.command_timeout);
        nodes.push_back(s->at);
        servers_.push_back(std::move(s));
    }
    if (servers_.size() == 1) {
        servers_.front()->verified = true;  // one server, one vote
    } else {
        // Different URLs can reach one server (localhost and 127.0.0.1, a unix socket): compare
        // what the servers say they are. Servers down now are checked when they first answer.
        std::vector<connection*> conns;
        auto deadline = steady::time_point::min();
        for (auto& s : servers_) {
            conns.push_back(&s->at->renewal_connection());
            deadline = std::max(deadline, conns.back()->default_deadline());
        }
        check_identities(conns, deadline);
        {
            dlock::detail::lock_guard lock(identity_mutex_);
            if (!identity_error_.empty()) throw error(errc::invalid_argument, identity_error_);
        }
        // Best effort: load the functions and the scripts where they are missing (a new server).
        // A script call that finds neither costs a second round (EVAL after "Function not found"
        // or NOSCRIPT), and that round starts only when the slowest server of the first has
        // answered or timed out: with one server paused, the healthy ones would miss their
        // deadline on every attempt.
        std::vector<exchange> loads;
        for (auto& s : servers_) {
            auto& renewals = s->at->renewal_connection();
            if (!s->verified || !renewals.is_open()) continue;
            exchange x{&renewals, {}, renewals.default_deadline()};
            x.commands.push_back({"FUNCTION", "LOAD", "REPLACE", functions_library()});
            for (const auto& script : all_scripts())
                x.commands.push_back({"SCRIPT", "LOAD", script.source});
            loads.push_back(std::move(x));
        }
        exchange_all(loads);  // failures (an ACL without FUNCTION, SCRIPT) leave the second round
    }
    const auto wake = [this](steady::time_point by) { wake_by(by); };
    if (nodes.size() == 1) {
        subscribers_.push_back(std::make_unique<subscriber>(std::move(nodes), wake));
    } else {
        for (auto& n : nodes)
            subscribers_.push_back(std::make_unique<subscriber>(std::vector{std::move(n)}, wake));
    }
}

engine::~engine() { stop(); }

namespace {
/// The run_id line of an INFO reply; empty when there is none.
std::string run_id_of(const reply& info) {
    constexpr std::string_view field = "run_id:";
    const auto at = info.text.find(field);
    if (info.is_error() || at == std::string::npos) return {};
    const auto begin = at + field.size();
    return info.text.substr(begin, info.text.find_first_of("\r\n", begin) - begin);
}
}  // namespace

void engine::check_identities(const std::vector<connection*>& conns, steady::time_point deadline) {
    std::vector<exchange> asks;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < servers_.size(); ++i) {
        if (servers_[i]->verified || !conns[i]) continue;
        asks.push_back({conns[i], {{"INFO", "server"}}, deadline});
        which.push_back(i);
    }
    if (asks.empty()) return;
    exchange_all(asks);
    dlock::detail::lock_guard lock(identity_mutex_);
    for (std::size_t k = 0; k < asks.size(); ++k) {
        auto& s = *servers_[which[k]];
        if (s.verified) continue;  // another thread checked it meanwhile
        if (asks[k].ec && asks[k].ec != errc::auth_failed) continue;  // no answer: still pending
        // Refused credentials: its scripts fail the same way, so it never votes anyway. An ACL
        // that denies INFO (NOPERM) leaves the server unchecked but counted.
        const auto id = asks[k].ec ? std::string() : run_id_of(asks[k].replies.front());
        bool duplicate = false;
        for (std::size_t j = 0; j < servers_.size() && !id.empty(); ++j) {
            if (j == which[k] || !servers_[j]->verified ||
                servers_[j]->run_id(identity_mutex_) != id)
                continue;
            duplicate = true;
            if (identity_error_.empty()) {
                identity_error_ = "client_options: " + config_.servers[j].describe() + " and " +
                                  config_.servers[which[k]].describe() +
                                  " are the same redis-server (run_id " + id +
                                  "); it would vote twice";
            }
        }
        if (duplicate) continue;  // stays unverified: its votes never count
        s.run_id(identity_mutex_) = id;
        s.verified = true;
    }
    bool pending = false;
    for (const auto& s : servers_) pending = pending || !s->verified;
    identities_pending_ = pending;
}

bool engine::counts(std::size_t i) const noexcept { return servers_[i]->verified; }

void engine::suspect_failures(const std::vector<script_batch>& batches) noexcept {
    for (std::size_t i = 0; i < batches.size(); ++i) {
        const auto& b = batches[i];
        if (b.ec) {
            servers_[i]->at->suspect(*b.conn, b.error);
            continue;
        }
        for (const auto& r : b.replies) {
            if (r.is_error() && r.text.starts_with("READONLY")) {
                servers_[i]->at->suspect(*b.conn, r.text);
                break;
            }
        }
    }
}

std::vector<connection*> engine::newly_answering(const std::vector<script_batch>& batches) const {
    std::vector<connection*> answered(servers_.size(), nullptr);
    for (std::size_t i = 0; i < batches.size(); ++i) {
        if (!batches[i].ec && !counts(i)) answered[i] = batches[i].conn;
    }
    return answered;
}

void engine::start() {
    worker_.start([this](std::stop_token st) { run(st); });
    // A node that moves (node.hpp) wakes the background thread: the subscriber follows it then.
    // Weak: a watch may keep a node, and its source, after the engine is gone.
    for (auto& s : servers_) {
        s->at->on_moved([weak = weak_from_this()] {
            if (const auto self = weak.lock()) self->wake();
        });
    }
}

void engine::stop() noexcept {
    if (forked()) {
        // A forked child's copy: the background thread runs only in the parent (its handle must be
        // neither joined nor detached here), and the leases are the parent's, inert here. Only
        // the child's copies of the descriptors are closed (by the members' destructors).
        worker_.abandon();
        wake_fd_.close();
        return;
    }
    worker_.stop([this] { wake(); });
    // Nobody renews or watches the leases still alive: they can no longer be guaranteed.
    std::vector<std::shared_ptr<lease_core>> orphaned;
    {
        dlock::detail::lock_guard lock(registry_mutex_);
        orphaned = registry_.lose_all();
    }
    for (auto& lease : orphaned)
        lease->lose(make_error_code(errc::lock_lost), lost_reason::client_closed);
    for (auto& s : subscribers_) s->wake_all();
    wake_fd_.close();
}

void engine::wake_by(steady::time_point by) noexcept {
    last_active_.store(steady::now().time_since_epoch().count());
    if (by.time_since_epoch().count() < worker_wakes_at_.load()) wake();
}

void engine::wake() noexcept { wake_fd_.signal(); }

bool engine::subscribed(const std::string& channel) const {
    const auto on = std::count_if(subscribers_.begin(), subscribers_.end(),
                                  [&](const auto& s) { return s->subscribed(channel); });
    return static_cast<std::size_t>(on) >= quorum::majority(subscribers_.size());
}

void engine::report_error(std::error_code ec, std::string_view what) noexcept {
    dlock::detail::report_to(config_.error_handler, ec, what);
}

void engine::notify(const lock_event& event) noexcept {
    dlock::detail::notify_observer(config_.observer, config_.error_handler, event);
}

void engine::report_node_failure(std::string_view name, std::uint64_t token, const script_batch& b,
                                 std::string_view why) noexcept {
    if (servers_.size() == 1) return;
    try {
        const auto server = b.conn->settings().endpoint.describe();
        lock_event e{event_kind::node_failed, name, token,
                     b.ec ? b.ec : make_error_code(errc::server_error), steady::now()};
        e.server = server;
        e.detail = why.empty() ? std::string_view(b.error) : why;
        notify(e);
    } catch (...) {
        // Out of memory: the failure is still in the call's own message.
    }
}

reply engine::command(const std::vector<std::string>& args, std::error_code& ec) noexcept {
    ec.clear();
    try {
        if (args.empty()) {
            fail(ec, errc::invalid_argument, "command: no arguments");
            return {};
        }
        node::pooled conn(*servers_.front()->at);
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
        node::pooled conn(*servers_.front()->at);
        // The same KEYS as the semaphore's other scripts: one hash slot, one layout.
        const script_call call{
            script,
            keys(*protocol, name),
            {std::to_string(permits), channel(name), ms_text(config_.idle_expiry)}};
        const auto r = run_script(*conn.get(), call, ec);
        if (!ec && r.type != reply::kind::integer) script_error(call, r, *conn.get(), ec);
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    }
}

std::unique_ptr<lock_watch> engine::watch(std::string_view name, std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return nullptr;
        std::vector<std::shared_ptr<node>> nodes;
        nodes.reserve(servers_.size());
        for (const auto& s : servers_) nodes.push_back(s->at);
        return make_watch(nodes, key(name), channel(name), ec);
    } catch (const std::exception& e) {
        fail(ec, errc::connection_failed, std::string("watch: ") + e.what());
        return nullptr;
    }
}

engine::answer engine::answer_of(const round& r, std::size_t i) const noexcept {
    if (r.batches[i].ec) return answer::failed;
    return counts(i) ? answer::counted : answer::uncounted;
}

engine::round engine::run_on_every_server(const round_plan& plan) {
    round run;
    std::vector<connection*> conns;
    std::vector<steady::time_point> own;
    conns.reserve(servers_.size());
    own.reserve(servers_.size());
    for (auto& s : servers_) {
        if (plan.renewals) {
            conns.push_back(&s->at->renewal_connection());
        } else {
            run.conns.emplace_back(*s->at, plan.pool_wait);
            if (!run.conns.back()) {
                run.conns.clear();
                run.lent = false;
                return run;
            }
            conns.push_back(run.conns.back().get());
        }
        own.push_back(conns.back()->default_deadline());
    }
    const auto connected = steady::now();
    run.batches.reserve(servers_.size());
    for (std::size_t i = 0; i < servers_.size(); ++i) {
        run.batches.push_back({conns[i], plan.calls,
                               plan.deadline ? plan.deadline(own[i], connected) : own[i],
                               plan.messages_first});
    }
    run_everywhere(run.batches);
    suspect_failures(run.batches);
    if (plan.check_identities && identities_pending_) {
        // A server that was down when the client was made and answers now: learn what it is
        // before its vote counts. Only servers that just answered are asked, so one that is still
        // paused or unreachable costs nothing more.
        const auto answered = newly_answering(run.batches);
        auto until = steady::now();
        if (plan.identity_within) {
            until = deadline_after(until, *plan.identity_within);
        } else {
            for (const auto* c : answered)
                if (c) until = std::max(until, c->default_deadline());
        }
        check_identities(answered, until);
    }
    return run;
}

lock_info engine::inspect(std::string_view name, std::error_code& ec) noexcept {
    ec.clear();
    try {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return {};
        const auto call = one_call(inspect_call(key(name), channel(name)));
        auto run = run_on_every_server({call});
        auto& batches = run.batches;
        std::vector<lock_info> views(batches.size());
        for (std::size_t i = 0; i < batches.size(); ++i) {
            auto& b = batches[i];
            auto& v = views[i];
            v.name = std::string(name);
            v.server = b.conn->settings().endpoint.describe();
            std::string why;
            if (b.ec) {
                v.error = b.error.empty() ? dlock::detail::message_for(b.ec) : b.error;
            } else if (!parse_inspect_reply(b.replies.front(), v, why)) {
                v.error = "redis " + v.server + ": " + why;
            }
            if (!v.error.empty() && servers_.size() == 1) {
                fail(ec, b.ec ? b.ec : make_error_code(errc::unexpected_reply), v.error);
                return {};
            }
        }
        if (servers_.size() == 1) {
            views.front().server.clear();
            return std::move(views.front());
        }
        return dlock::detail::merge_views(std::string(name), std::move(views), quorum(), ec);
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return {};
    }
}

std::string engine::record_once(std::string_view name, std::string_view value,
                                std::error_code& ec) noexcept {
    ec.clear();
    try {
        const auto quoted = "record_once(\"" + std::string(name) + "\")";
        dlock::detail::validate_record(name, value, max_name_length, quoted, ec);
        if (ec) return {};
        const auto* script = find_script("record_once");
        if (!script) std::abort();  // the build embeds every src/redis/lua/*.lua
        const auto record = key(name) + ":record";
        // Round 1 reads every server; a second round writes only where the verdict says
        // (docs/redlock.md, "Records"): the agreed value back where it is missing, or the
        // caller's value on first use.
        // A first writer racing us may have written some servers but not yet the others when we
        // read: undecided for a moment. Such a race settles within its write round, so an
        // undecided verdict is read again with back-off until one command timeout has passed.
        auto retry_until = steady::time_point::min();
        auto pause = std::chrono::milliseconds(1);
        for (;;) {
            round_plan read_all{one_call({script, {record}, {"", ""}})};
            read_all.check_identities = true;
            auto run = run_on_every_server(read_all);
            auto& batches = run.batches;
            if (retry_until == steady::time_point::min())
                retry_until = batches.front().conn->default_deadline();
            std::vector<quorum::record_read> reads(servers_.size());
            std::vector<std::string> said(servers_.size());  // each server's answer, for messages
            // Reads batches[i]'s reply into reads[i]; false (and `ec` set) when the only server
            // failed.
            const auto read = [&](std::size_t i) {
                auto& b = batches[i];
                const auto server = b.conn->settings().endpoint.describe();
                const auto& r = b.replies.empty() ? reply{} : b.replies.front();
                if (!b.ec && r.type != reply::kind::string && !r.is_nil()) {
                    if (r.is_error()) {
                        script_error(b.calls->front(), r, *b.conn, b.ec);
                    } else {
                        fail(b.ec, errc::unexpected_reply,
                             "redis " + server + ": " + record + " answered " + to_string(r.type) +
                                 " \"" + r.text + "\"");
                    }
                    b.error = dlock::detail::message_for(b.ec);
                }
                reads[i] = {};
                if (b.ec) {
                    if (servers_.size() == 1) {
                        fail(ec, b.ec,
                             quoted + ": " + (b.error.empty() ? b.ec.message() : b.error));
                        return false;
                    }
                    said[i] = b.error.empty() ? "redis " + server + ": " + b.ec.message() : b.error;
                    return true;
                }
                if (answer_of(run, i) == answer::uncounted) {
                    said[i] = "redis " + server + ": not counted";
                    return true;
                }
                reads[i].answered = true;
                if (!r.is_nil()) reads[i].stored = r.text;
                said[i] = "redis " + server + ": " + (r.is_nil() ? "none" : "\"" + r.text + "\"");
                return true;
            };
            for (std::size_t i = 0; i < batches.size(); ++i)
                if (!read(i)) return {};
            auto step = quorum::decide_record(reads, value);
            if (step.what == quorum::record_step::kind::first_write ||
                (step.what == quorum::record_step::kind::agreed && !step.to.empty())) {
                // Compare-and-set: each server stores the value only if it still holds what it was
                // seen holding, so a racing first writer or write-back is never overwritten.
                std::vector<script_batch> writes;
                writes.reserve(step.to.size());
                for (const auto i : step.to) {
                    writes.push_back(
                        {batches[i].conn,
                         one_call({script, {record}, {step.value, reads[i].stored.value_or("")}}),
                         batches[i].conn->default_deadline()});
                }
                run_everywhere(writes);
                if (step.what == quorum::record_step::kind::agreed) {
                    // Already on a majority: the answer stands whatever the write-back did.
                    return step.value;
                }
                for (std::size_t k = 0; k < step.to.size(); ++k)
                    batches[step.to[k]] = std::move(writes[k]);
                for (const auto i : step.to)
                    if (!read(i)) return {};
                step = quorum::decide_record(reads, value);
            }
            if (step.what == quorum::record_step::kind::agreed) return step.value;
            if (step.what == quorum::record_step::kind::undecided &&
                steady::now() + pause < retry_until) {
                run = {};  // return the connections before sleeping
                std::this_thread::sleep_for(pause);
                pause = std::min(pause * 2, std::chrono::milliseconds(50));
                continue;
            }
            std::string all;
            for (const auto& s : said) add_failure(all, s);
            const auto of = " of " + std::to_string(servers_.size()) + " servers (" + all + ")";
            if (step.what == quorum::record_step::kind::undecided) {
                // Never a guess: a value on a minority may be what is left of an agreed value after
                // restarts without data, or a first write that failed half-way; two values are
                // first writers that raced.
                fail(
                    ec, errc::invalid_argument,
                    quoted + ": no value is stored on a quorum (" + std::to_string(quorum()) + ")" +
                        of +
                        ": servers restarted without their data, or first writers failed or raced; "
                        "set " +
                        record +
                        " to the one right value on every server (or delete it "
                        "everywhere while nothing uses it)");
            } else {
                fail(ec, errc::quorum_unreachable,
                     quoted + ": fewer than a quorum (" + std::to_string(quorum()) + ") answered" +
                         of);
            }
            return {};
        }
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
        return {};
    }
}

std::string engine::await_replicas(connection& conn, steady::time_point latest) {
    if (config_.wait_replicas == 0) return {};
    const auto k = std::to_string(config_.wait_replicas);
    const auto t = ms_text(config_.wait_timeout);
    exchange x{&conn, {{"WAIT", k, t}}};
    if (config_.wait_aof) x.commands.push_back({"WAITAOF", "0", k, t});
    // The server blocks up to wait_timeout per command; the usual bound comes on top.
    x.deadline = std::min(
        latest, deadline_after(steady::now(), config_.command_timeout + config_.wait_timeout * 2));
    exchange_all({&x, 1});
    if (x.ec) return "WAIT " + k + " " + t + " failed: " + x.error;
    const auto& acked = x.replies.front();
    if (acked.type != reply::kind::integer)
        return "WAIT " + k + " " + t + " answered " + acked.text;
    if (acked.integer < config_.wait_replicas) {
        return "only " + std::to_string(acked.integer) + " of the " + k +
               " replicas required acknowledged it within " + t + "ms (WAIT " + k + " " + t + ")";
    }
    if (!config_.wait_aof) return {};
    const auto& aof = x.replies.back();
    if (aof.is_error() && aof.text.find("unknown command") != std::string::npos) {
        return "wait_aof asks for WAITAOF, which this server lacks (Redis 7.2 or later has it): "
               "grants cannot wait for the replicas' fsync here";
    }
    if (aof.type != reply::kind::array || aof.elements.size() != 2)
        return "WAITAOF 0 " + k + " " + t + " answered " + aof.text;
    if (aof.elements[1].integer < config_.wait_replicas) {
        return "only " + std::to_string(aof.elements[1].integer) + " of the " + k +
               " replicas required wrote it to their append-only file within " + t +
               "ms (WAITAOF 0 " + k + " " + t + ")";
    }
    return {};
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
                                        std::chrono::milliseconds node_timeout,
                                        std::uint64_t ticket_floor, steady::time_point deadline,
                                        const std::string& waiter) {
    // Before any wait for a connection: the caller's validity counts from its own earlier send
    // time, so this check is never more generous than the grant.
    const auto sent = steady::now();
    const bool single = servers_.size() == 1;
    round_plan plan{one_call(
        {protocol.acquire,
         keys(protocol, name),
         {token, ms_text(lease), std::to_string(request.count), std::to_string(request.limit),
          ms_text(waiter_liveness), channel(name), request.reenter ? "1" : "0",
          std::to_string(ticket_floor), waiter, ms_text(config_.idle_expiry), clock_floor()}})};
    plan.pool_wait = deadline;
    // Counted from `connected`, not from `sent`: a wait for a free connection is no server's
    // fault. One server: its own timeouts. Several: each gets node_timeout, far below the lease,
    // so a dead or slow server costs only that (docs/redlock.md).
    plan.deadline = [&](steady::time_point own, steady::time_point connected) {
        return single ? own : deadline_after(connected, node_timeout);
    };
    plan.check_identities = true;
    plan.identity_within = node_timeout;
    auto run = run_on_every_server(plan);
    if (!run.lent) {
        // Every connection stayed busy until the caller's own wait bound: contention here.
        attempt_outcome out;
        out.error = make_error_code(errc::timeout);
        out.failures = "lock \"" + std::string(name) +
                       "\": no free connection to the server before the wait bound";
        return out;
    }
    auto& batches = run.batches;

    attempt_outcome out;
    std::vector<quorum::acquire_vote> votes(servers_.size());  // failed unless set below
    for (std::size_t i = 0; i < batches.size(); ++i) {
        auto& b = batches[i];
        if (answer_of(run, i) == answer::uncounted) {
            dlock::detail::lock_guard lock(identity_mutex_);
            fail(b.ec, errc::invalid_argument,
                 "redis " + b.conn->settings().endpoint.describe() + ": not counted: " +
                     (identity_error_.empty() ? "its identity (INFO run_id) is not known yet"
                                              : identity_error_));
            b.error = dlock::detail::message_for(b.ec);
        }
        if (!b.ec && !is_acquire_reply(b.replies.front()))
            script_error(b.calls->front(), b.replies.front(), *b.conn, b.ec);
        if (b.ec) {
            if (b.error.empty()) b.error = dlock::detail::message_for(b.ec);
            if (!out.error) out.error = b.ec;
            add_failure(out.failures, b.error);
            report_node_failure(name, 0, b);
            continue;
        }
        const auto& r = b.replies.front();
        if (r.elements.size() == 4) out.recorded_limit = r.elements[3].integer;
        if (r.elements[0].integer == 1) {
            votes[i] = {quorum::acquire_vote::kind::granted, r.elements[1].integer};
        } else {
            const auto ticket = r.elements.size() == 3 && r.elements[2].integer > 0
                                    ? static_cast<std::uint64_t>(r.elements[2].integer)
                                    : 0;
            votes[i] = {quorum::acquire_vote::kind::held, 0, r.elements[1].integer, ticket};
        }
    }
    const auto tally = quorum::tally_acquire(votes);
    out.node_tickets.reserve(votes.size());
    for (const auto& v : votes)
        out.node_tickets.push_back(v.what == quorum::acquire_vote::kind::held ? v.ticket : 0);
    out.granting = tally.granting;
    out.holding = tally.holding;
    out.holder_ms = tally.holder_ms;
    out.ticket = tally.ticket;
    if (tally.majority_granted()) {
        std::size_t raised = 0;
        // Fencing write-back: the grant counts only once a quorum holds a counter >= token
        // (docs/redlock.md, "Fencing tokens across independent counters"). With the fence
        // agreed, granting servers whose counter lags are still raised: otherwise, after servers
        // restart empty one at a time, the highest counter could be left on a minority that the
        // next quorum misses, and a token would go backwards.
        const auto& raise_on = tally.fence_agreed() ? tally.lagging : tally.behind;
        if (!raise_on.empty()) {
            std::vector<script_batch> raises;
            raises.reserve(raise_on.size());
            const auto raise = one_call({&raise_fence_script(),
                                         {key(name), fence(name)},
                                         {token, std::to_string(tally.fence),
                                          ms_text(config_.idle_expiry), ms_text(lease)}});
            for (const auto i : raise_on) {
                raises.push_back(
                    {batches[i].conn, raise, deadline_after(steady::now(), node_timeout)});
            }
            run_everywhere(raises);
            for (const auto& r : raises) {
                if (!r.ec && r.replies.front().type == reply::kind::integer &&
                    r.replies.front().integer == 1)
                    ++raised;
            }
        }
        const auto validity = quorum::grant_validity(sent, lease, config_.drift);
        if (quorum::decide_acquire(tally, raised, steady::now(), validity) ==
            quorum::acquire_verdict::granted) {
            // The WAIT safeguard: the grant (and the fence counter the same script wrote) counts
            // only once enough replicas have it; else it is released and never handed out.
            const auto unacked = single ? await_replicas(*batches.front().conn, validity) : "";
            if (unacked.empty()) {
                out.granted = true;
                out.fencing_token = static_cast<std::uint64_t>(tally.fence);
                return out;
            }
            out.error = make_error_code(errc::quorum_unreachable);
            out.failures = "lock \"" + std::string(name) + "\" was granted, but " + unacked +
                           "; the grant was released";
            out.granting = 0;
            out.holding = 0;
        }
    }
    // Not granted: undo whatever landed, on every server, including those that did not answer
    // (their SET may have arrived after our deadline). Compare-and-delete touches only our token.
    // A re-entry that failed holds nothing of its own; a queued waiter leaves through leave_queue.
    if ((out.granting > 0 || !out.failures.empty()) && !request.reenter && !protocol.queued) {
        // Return our connections first: the undo takes its own, and a caller must never hold one
        // while it waits for another (with a full pool, that would wait on itself).
        run = {};
        release_everywhere(protocol, name, token, node_timeout, waiter);
        out.undone = true;
    }
    return out;
}

void engine::leave_queue(const lock_protocol& protocol, std::string_view name,
                         const std::string& token,
                         std::chrono::milliseconds node_timeout) noexcept {
    try {
        // The leave script takes the release's arguments (protocol.hpp): no registered id of its
        // own, the fence's clock floor for a key it hands on.
        const script_call call{protocol.leave,
                               keys(protocol, name),
                               {token, channel(name), ms_text(handoff_lease), "0",
                                ms_text(config_.idle_expiry), "", clock_floor()}};
        if (servers_.size() > 1) {
            // Redlock's registered mutex waiter (the only kind it queues): off every server at
            // once, each within node_timeout like an undo; a server that misses it purges the
            // entry when its liveness runs out.
            const auto deadline = deadline_after(steady::now(), node_timeout);
            round_plan plan{one_call(call)};
            plan.deadline = [&](steady::time_point, steady::time_point) { return deadline; };
            run_on_every_server(plan);
            return;
        }
        node::pooled conn(*servers_.front()->at);
        std::error_code ec;
        const auto r = run_script(*conn.get(), call, ec);
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
                                const std::string& token, std::chrono::milliseconds node_timeout,
                                const std::string& registered) {
    const auto deadline = deadline_after(
        steady::now(), servers_.size() == 1 ? config_.command_timeout : node_timeout);
    round_plan plan{one_call({protocol.release,
                              keys(protocol, name),
                              {token, channel(name), ms_text(handoff_lease), "0",
                               ms_text(config_.idle_expiry), registered, clock_floor()}})};
    plan.deadline = [&](steady::time_point, steady::time_point) { return deadline; };
    run_on_every_server(plan);
}

dlock::lease engine::grant(std::string_view name, const std::string& token, std::uint64_t fence,
                           const lock_options& options, lock_kind kind, steady::time_point sent,
                           steady::time_point valid_until, bool handed_off, bool after_wait,
                           bool partial) {
    auto core = std::make_shared<lease_core>(shared_from_this(), std::string(name), token, fence,
                                             options, sent, valid_until, kind, after_wait);
    track(core, handed_off || partial);
    lock_event acquired{event_kind::acquired, name, fence, {}, steady::now()};
    acquired.handed_off = handed_off;
    notify(acquired);
    return dlock::detail::lease_access::make(std::move(core));
}

dlock::lease engine::reenter(const lock_protocol& protocol, std::string_view name,
                             const lease& held, const lock_options& options, std::error_code& ec) {
    const auto* core = dlock::detail::lease_access::core(held);
    if (!core || &core->owner() != this || core->name() != name ||
        core->kind() != lock_kind::reentrant || core->released()) {
        dlock::detail::refuse_reentry(name, "not a live grant of this lock on this client", ec);
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
        auto level =
            grant(name, core->token(), result.fencing_token, options, lock_kind::reentrant, sent,
                  dlock::detail::valid_until(sent, lease_ms, config_.drift), false, false);
        dlock::detail::lock_guard lock(reentrant_mutex_);
        ++reentrant_[core->token()].extra_levels;
        return level;
    }
    if (result.error) {
        // No answer: the request may still reach the server and add a level we never hand out.
        // Undoing it now could take the outer level instead (it may not have landed), so the
        // owner's last release removes the lock whatever the depth.
        {
            dlock::detail::lock_guard lock(reentrant_mutex_);
            reentrant_[core->token()].depth_unknown = true;
        }
        fail(ec, result.error, result.failures);
    } else {
        fail(ec, errc::lock_lost,
             "re-entering \"" + std::string(name) + "\": this owner no longer holds it");
    }
    return {};
}

const lock_protocol* engine::check_request(std::string_view name, const lock_request& request,
                                           const lock_options& options, std::error_code& ec) const {
    if (!dlock::detail::check_acquire(name, max_name_length, request, options, ec)) return nullptr;
    const auto* protocol = protocol_for(request.kind);
    if (!protocol || (request.kind != lock_kind::exclusive && servers_.size() > 1)) {
        fail(ec, errc::unsupported,
             std::string("lock \"") + std::string(name) + "\": the " + to_string(request.kind) +
                 " lock kind is not available " +
                 (servers_.size() > 1 ? "on Redlock (only dlock::mutex is)" : "in this build"));
        return nullptr;
    }
    return protocol;
}

/// One acquire_until call past its checks. The loop's skeleton (give-up order, events) is
/// core/acquire_policy.hpp; how it waits is its waiter strategy's (waiter.hpp); here is the I/O
/// of each step.
struct engine::acquire_run {
    using step = dlock::detail::acquire_step;
    using report = dlock::detail::attempt_report;

    acquire_run(engine& self, std::string_view name, const lock_protocol& protocol,
                const lock_request& request, const lock_options& options,
                steady::time_point deadline)
        : self(self),
          name(name),
          protocol(protocol),
          request(request),
          options(options),
          deadline(deadline),
          plan(dlock::detail::make_renewal_plan(options)),
          node_timeout(self.node_timeout_for(options.lease)),
          waiter(make_waiter(
              {request.kind, self.client_tag_, self.channel(name), node_timeout, self.config_.drift,
               &dlock::detail::random_jitter_ns, self.servers_.size()},
              protocol.queued)),
          policy(options, deadline) {
        // Already subscribed (a hot lock: our last wait on it lingers): register before the first
        // attempt, so a grant published after it is caught and no second attempt is needed.
        // Not for a call that cannot wait (try_lock()): a registration would only be left again.
        if (auto early = waiter->lingering();
            early && deadline > steady::now() && self.subscribed(early->channel))
            listen(waiter->listen_early());
    }
    // Once a request may have reached the server, every exit but a grant leaves the queue (or
    // the mutex waiters), which also releases (with hand-off) a grant whose reply we never saw.
    // Before `waiting` goes: the registration outlives the leave.
    ~acquire_run() {
        if (leave_armed) self.leave_queue(protocol, name, *waiter->leaves_as(), node_timeout);
    }
    acquire_run(const acquire_run&) = delete;
    acquire_run& operator=(const acquire_run&) = delete;

    void listen(const wait_target& target) {
        waiting.emplace(self.subscribers_, target, self.quorum());
    }

    /// Register for the release (or hand-off) message, then attempt again at once: a release
    /// between the first attempt and the subscription is caught by that attempt. Not needed when
    /// the channel was subscribed without a break since before the first attempt (lingering):
    /// then wait right away.
    step subscribe() {
        bool caught_up = false;
        if (!waiting) {
            listen(waiter->subscribe());
        } else {
            caught_up = policy.attempts() == 1 && waiting->subscribed_throughout();
        }
        if (!caught_up) {
            waiting->wait_subscribed(
                std::min(deadline, deadline_after(steady::now(), self.config_.command_timeout)),
                options.cancel);
        }
        return policy.subscribed(caught_up);
    }

    step wait(steady::time_point until) {
        waiting->wait(seen, until, options.cancel);
        // The WAIT safeguard counts a grant only once replicas acknowledged it: a hand-off
        // message is then only a wake-up, and the attempt that follows (which finds the lock
        // handed to us, refreshes it and is WAITed) grants.
        if (!waiter->granted_by_message() || self.config_.wait_replicas > 0) return policy.woke();
        std::optional<steady::time_point> more_until;  // Redlock: the rest of a quorum's grants
        for (;;) {
            const auto more = waiting->generation();  // before the messages: none is missed
            const auto messages = waiting->last_messages();
            const auto now = steady::now();
            if (const auto handed = waiter->woke(messages, now)) {
                waiting->granted();
                registered_as();
                granted = self.grant(name, token, handed->fence, options, request.kind,
                                     handed->sent, handed->valid_until, true, true);
                leave_armed = false;
                return policy.next(steady::now(), report::granted());
            }
            if (!more_until) {
                const auto grace = waiter->awaits_more(messages, now);
                if (grace <= grace.zero()) break;
                more_until = std::min(until, now + grace);
            }
            if (now >= *more_until || options.cancel.stop_requested()) break;
            waiting->wait(more, *more_until, options.cancel);
        }
        return policy.woke();
    }

    step attempt() {
        // Read the generation BEFORE the attempt: a release after a failed attempt bumps it.
        seen = waiting ? waiting->generation() : 0;
        token = waiter->next_token();
        const auto sent = steady::now();
        const auto lease_ms = *dlock::detail::lease_to_request(plan, sent, sent);
        if (waiter->leaves_as()) leave_armed = true;
        auto& master = *self.servers_.front()->at;
        auto moved_from = master.generation();
        auto result = self.attempt(protocol, name, token, lease_ms, request, node_timeout,
                                   waiter->ticket_floor(), deadline, waiter->waiter_id());
        // Sentinel: a master lost to a failover is not the end of the acquire. Ask for the new
        // master (verified with ROLE) until the caller's deadline, or failover_wait at most,
        // then attempt again there (docs/sentinel.md, "Reaction time"). An attempt that failed
        // on a master the node has since left is made again once on the new one, even past
        // the deadline (try_lock() right after a failover).
        bool moved_retry = false;
        while (self.config_.resolver && result.granting + result.holding == 0 &&
               failover_retryable(result)) {
            const auto now = steady::now();
            if (!failover_until) failover_until = deadline_after(now, self.config_.failover_wait);
            const auto until = std::min(deadline, *failover_until);
            if (now >= until) {
                if (moved_retry || master.generation() == moved_from) {
                    const auto why = self.config_.resolver->last_failure();
                    if (!self.config_.resolver->known() && !why.empty())
                        result.failures += "; " + why;
                    break;
                }
                moved_retry = true;
            } else {
                std::error_code ec;
                self.config_.resolver->master(until, ec);
                if (ec) {
                    result.failures += "; " + dlock::detail::message_for(ec);
                    break;
                }
            }
            moved_from = master.generation();
            result = self.attempt(protocol, name, token, lease_ms, request, node_timeout,
                                  waiter->ticket_floor(), deadline, waiter->waiter_id());
        }
        if (result.recorded_limit > 0 && !limit_reported) {
            // Not an error: the server's number decides, and this caller may have been started
            // before an operator changed it. Said once per acquire call.
            limit_reported = true;
            self.report_error(
                make_error_code(errc::invalid_argument),
                dlock::detail::permits_mismatch(
                    quoted(), static_cast<std::uint64_t>(result.recorded_limit), request.limit));
        }
        if (result.granted) {
            if (waiting) waiting->granted();
            registered_as();
            // Held on fewer than every node as a registered waiter: a node where it is queued
            // may still hand it the key (grant(), `partial`).
            const bool partial = self.servers_.size() > 1 && !waiter->waiter_id().empty() &&
                                 result.granting < self.servers_.size();
            granted = self.grant(name, token, result.fencing_token, options, request.kind, sent,
                                 dlock::detail::valid_until(sent, lease_ms, self.config_.drift),
                                 false, policy.attempts() > 0, partial);
            leave_armed = false;
            return policy.next(steady::now(), report::granted());
        }
        if (result.granting + result.holding < self.quorum()) {
            // Not contention: too few servers answered for any quorum.
            std::error_code code = result.error;
            failure = result.failures;
            if (self.servers_.size() > 1) {
                code = make_error_code(errc::quorum_unreachable);
                failure = quoted() + ": no quorum (" + std::to_string(self.quorum()) + " of " +
                          std::to_string(self.servers_.size()) +
                          ") could be reached: " + result.failures;
            }
            return policy.next(steady::now(), report::failed(code));
        }
        const auto now = steady::now();
        const auto retry = waiter->contended({{result.holder_ms, result.granting},
                                              result.holding,
                                              result.ticket,
                                              sent,
                                              lease_ms,
                                              std::move(result.node_tickets),
                                              result.undone},
                                             now);
        return policy.next(now, report::contended(retry));
    }

    /// Redlock: a holder that waited is registered under its waiter id on every node; its
    /// release takes that id off them all.
    void registered_as() {
        if (self.servers_.size() < 2 || waiter->waiter_id().empty()) return;
        dlock::detail::lock_guard lock(self.registered_mutex_);
        self.registered_as_[token] = waiter->waiter_id();
    }

    void give_up(const step& s, std::error_code& ec) {
        if (failure.empty()) failure = policy.give_up_message(s, quoted());
        fail(ec, s.error, failure);
        if (s.event) self.notify({*s.event, name, 0, ec, steady::now()});
    }

    std::string quoted() const { return "lock \"" + std::string(name) + "\""; }

    /// A failure a failover explains: the master gone, silent, or demoted (READONLY).
    static bool failover_retryable(const attempt_outcome& result) {
        return result.error == errc::connection_failed || result.error == errc::server_timeout ||
               result.failures.find("READONLY") != std::string::npos;
    }

    engine& self;
    std::string_view name;
    const lock_protocol& protocol;
    const lock_request& request;
    const lock_options& options;
    steady::time_point deadline;
    dlock::detail::renewal_plan plan;
    std::chrono::milliseconds node_timeout;
    std::unique_ptr<waiter_strategy> waiter;
    std::optional<listener> waiting;
    dlock::detail::acquire_policy policy;
    std::string failure;     // why the latest attempt failed, if it did
    std::uint64_t seen = 0;  // the notification generation read before the latest attempt
    bool leave_armed = false;
    bool limit_reported = false;  // a semaphore's other number on the server, said once
    std::string token;            // the owner token of the latest attempt
    std::optional<steady::time_point> failover_until;  // Sentinel: set at the first lost master
    dlock::lease granted;                              // the grant, once the policy says done
};

dlock::lease engine::acquire_until(std::string_view name, const lock_request& request,
                                   const lock_options& options, steady::time_point deadline,
                                   std::error_code& ec) noexcept {
    ec.clear();
    const dlock::detail::acquire_call call(*this, name, ec);  // since/waited, gave_up
    return dlock::detail::guarded(ec, [&]() -> dlock::lease {
        const auto* protocol = check_request(name, request, options, ec);
        if (!protocol) return {};
        if (request.reenter) return reenter(*protocol, name, *request.reenter, options, ec);
        using action = dlock::detail::acquire_step::action;
        acquire_run run(*this, name, *protocol, request, options, deadline);
        for (auto step = run.policy.start();;) {
            if (step.what == action::give_up) {
                run.give_up(step, ec);
                return {};
            }
            if (step.event) notify({*step.event, name, 0, {}, steady::now()});
            if (step.what == action::done) return std::move(run.granted);
            step = step.what == action::subscribe ? run.subscribe()
                   : step.what == action::wait    ? run.wait(step.until)
                                                  : run.attempt();
        }
    });
}

void engine::release(lease_core& lease, std::error_code& ec) noexcept {
    ec.clear();
    {
        dlock::detail::lock_guard lock(registry_mutex_);
        registry_.untrack(&lease);
    }
    try {
        // With several servers a paused one must not hold up unlock(): it gets node_timeout, and
        // our key there simply expires.
        const auto redlock_deadline =
            deadline_after(steady::now(), node_timeout_for(lease.plan().lease));
        const auto* protocol = protocol_for(lease.kind());
        bool whole = false;  // the owner's last level after a re-entry of unknown outcome
        if (lease.kind() == lock_kind::reentrant) {
            dlock::detail::lock_guard lock(reentrant_mutex_);
            if (const auto it = reentrant_.find(lease.token()); it != reentrant_.end()) {
                if (it->second.extra_levels > 0) {
                    --it->second.extra_levels;
                } else {
                    whole = it->second.depth_unknown;
                    reentrant_.erase(it);
                }
            }
        }
        std::string registered;  // Redlock: the waiter id this holder registered under
        if (servers_.size() > 1) {
            dlock::detail::lock_guard lock(registered_mutex_);
            if (const auto it = registered_as_.find(lease.token()); it != registered_as_.end()) {
                registered = std::move(it->second);
                registered_as_.erase(it);
            }
        }
        round_plan plan{one_call(
            {protocol->release,
             keys(*protocol, lease.name()),
             {lease.token(), channel(lease.name()), ms_text(handoff_lease), whole ? "1" : "0",
              ms_text(config_.idle_expiry), registered, clock_floor()}})};
        plan.deadline = [&](steady::time_point own, steady::time_point) {
            return servers_.size() == 1 ? own : redlock_deadline;
        };
        // A holder that waited likely has a waiter behind it, whom the release hands the lock.
        plan.messages_first = lease.after_wait();
        auto run = run_on_every_server(plan);
        auto& batches = run.batches;
        lease.mark_released();
        std::vector<quorum::owner_vote> votes;
        std::string failures;
        for (std::size_t i = 0; i < batches.size(); ++i) {
            auto& b = batches[i];
            // Another URL of a counted server, or unknown: no vote.
            if (answer_of(run, i) == answer::uncounted) continue;
            if (!b.ec && b.replies.front().type != reply::kind::integer) {
                script_error(b.calls->front(), b.replies.front(), *b.conn, b.ec);
                b.error = dlock::detail::message_for(b.ec);
            }
            if (b.ec) {
                if (!ec) ec = b.ec;
                add_failure(failures, b.error);
                votes.push_back(quorum::owner_vote::failed);
                report_node_failure(lease.name(), lease.fencing_token(), b);
            } else {
                votes.push_back(quorum::owner_vote_of(b.replies.front().integer));
            }
        }
        const auto tally = quorum::tally_owner(votes, servers_.size());
        const auto deleted = tally.ours, not_ours = tally.not_ours;
        const auto verdict = quorum::decide_release(tally);  // the renewal rule, docs/redlock.md
        if (verdict == quorum::release_verdict::released) {
            // Servers that could not be reached keep our key until it expires; nobody else is hurt.
            ec.clear();
            return;  // dlock::lease reports the released event
        }
        if (verdict == quorum::release_verdict::lost) {
            lease.note_loss(tally.taken > 0 ? lost_reason::taken_over : lost_reason::deleted);
            fail(ec, errc::lock_lost,
                 "lock \"" + lease.name() +
                     "\" was no longer held by this owner (expired or taken " + "over" +
                     (servers_.size() > 1 ? " on " + std::to_string(not_ours) + " of " +
                                                std::to_string(servers_.size()) + " servers"
                                          : std::string()) +
                     ")");
        } else if (servers_.size() == 1) {
            // not_ours == 0 here: the server failed. Sent again from the background thread (a
            // Sentinel failover: to the new master) until answered or our key has run out.
            const auto now = steady::now();
            const auto first_gap = std::chrono::milliseconds(250);
            {
                dlock::detail::lock_guard lock(pending_mutex_);
                pending_releases_.push_back(
                    {plan.calls,
                     now + std::max(lease.plan().lease, handoff_lease) + std::chrono::seconds(1),
                     now + first_gap, first_gap});
            }
            wake_by(now + first_gap);
            fail(ec, ec, failures + "; retried in the background until the lease would end");
        } else {
            fail(ec, errc::quorum_unreachable,
                 "release of \"" + lease.name() + "\": too few servers answered (" +
                     std::to_string(deleted) + " deleted it, " + std::to_string(not_ours) +
                     " did not hold it): " + failures);
        }
        notify({event_kind::error, lease.name(), lease.fencing_token(), ec, steady::now()});
    } catch (...) {
        lease.mark_released();
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "release: out of memory");
    }
}

void engine::track(const std::shared_ptr<lease_core>& lease, bool extend_soon) {
    auto next = std::min(
        dlock::detail::next_renewal_at(lease->plan(), lease->granted_at(), lease->granted_at()),
        lease->valid_until());
    // A hand-off grant carries the short hand-off lease: extend it to the owner's own lease soon,
    // but not on the hand-off's critical path (a short critical section releases before that).
    if (extend_soon) next = std::min(next, steady::now() + handoff_lease / 4);
    {
        dlock::detail::lock_guard lock(registry_mutex_);
        registry_.track(lease, next, extend_soon);
    }
    wake_by(next);
}

steady::time_point engine::renew_due(steady::time_point now) {
    struct due_lease {
        std::shared_ptr<lease_core> lease;
        std::chrono::milliseconds request;
        bool extend_once;  // a hand-off grant's first extension (track())
    };
    std::vector<due_lease> due;
    dlock::detail::lease_registry::due_batch batch;
    // The earliest deadline of EVERY lease, due or not: the renewal round trip below must not
    // block past it, or that lease's loss (lost_token, on_lost) would be reported late.
    auto latest = steady::time_point::max();
    {
        dlock::detail::lock_guard lock(registry_mutex_);
        batch = registry_.due(now);
        for (auto& d : batch.renew) {
            const auto& plan = d.lease->plan();
            const auto request = dlock::detail::lease_to_request(plan, d.lease->granted_at(), now);
            if (request && (plan.renew || d.extend_once)) {
                due.push_back({std::move(d.lease), *request, d.extend_once});
            } else {
                registry_.schedule(d.lease.get(), d.lease->valid_until());  // let it run out
            }
        }
        latest = registry_.earliest_deadline();
    }
    // Ran out: lose() without a reason asks expiry_reason() (expired or max_hold).
    for (auto& lease : batch.lost) lease->lose(make_error_code(errc::lock_lost));
    if (!due.empty()) {
        const auto sent = steady::now();
        auto calls = std::make_shared<std::vector<script_call>>();
        calls->reserve(due.size());
        for (const auto& d : due) {
            const auto* protocol = protocol_for(d.lease->kind());
            calls->push_back(
                {protocol->renew,
                 keys(*protocol, d.lease->name()),
                 {d.lease->token(), ms_text(d.request), ms_text(config_.idle_expiry)}});
        }
        bool cut_short = false;  // some batch's own bound lies past `latest`
        round_plan plan{calls, /*renewals=*/true};
        plan.deadline = [&](steady::time_point own, steady::time_point) {
            cut_short = cut_short || latest < own;
            return std::min(own, latest);
        };
        auto run = run_on_every_server(plan);
        const auto& batches = run.batches;
        // The WAIT safeguard: a renewal no replica set acknowledged does not extend the validity.
        std::string unacked;
        if (servers_.size() == 1 && !batches.front().ec)
            unacked = await_replicas(*batches.front().conn, latest);
        // Stopped waiting at another lease's deadline, not at the server's own bound: not yet a
        // renewal failure. Retry at once, right after that lease's loss is reported.
        const bool interrupted = cut_short && steady::now() >= latest;
        std::string failures;
        for (const auto& b : batches) {
            if (b.ec) add_failure(failures, b.error);
        }
        std::vector<std::shared_ptr<lease_core>> renewed;
        std::vector<std::pair<std::shared_ptr<lease_core>, lost_reason>> lost;
        std::vector<std::pair<std::shared_ptr<lease_core>, std::string>> failed;  // lease, why
        std::vector<std::shared_ptr<lease_core>> went_uncertain;
        struct refusal {
            std::shared_ptr<lease_core> lease;
            std::size_t server;
            std::string why;
        };
        std::vector<refusal> refused;  // a server's error reply to one lease's renewal
        {
            dlock::detail::lock_guard lock(registry_mutex_);
            std::vector<quorum::owner_vote> votes;
            for (std::size_t i = 0; i < due.size(); ++i) {
                auto& lease = due[i].lease;
                if (!registry_.tracked(lease.get())) continue;  // released meanwhile
                votes.clear();
                std::string why = failures;
                for (std::size_t k = 0; k < batches.size(); ++k) {
                    const auto& b = batches[k];
                    if (answer_of(run, k) != answer::counted) continue;  // see check_identities
                    const auto& r = b.replies[i];
                    if (r.type != reply::kind::integer) {  // e.g. OOM, WRONGTYPE: counts as failed
                        add_failure(why, b.conn->settings().endpoint.describe() + ": " + r.text);
                        votes.push_back(quorum::owner_vote::failed);
                        refused.push_back({lease, k, r.text});
                        continue;
                    }
                    votes.push_back(quorum::owner_vote_of(r.integer));
                }
                const auto tally = quorum::tally_owner(votes, servers_.size());
                auto verdict = quorum::decide_renew(tally);
                if (verdict == quorum::renew_verdict::renewed && !unacked.empty()) {
                    verdict = quorum::renew_verdict::failed;
                    why = "renewed, but " + unacked;
                }
                switch (verdict) {
                    case quorum::renew_verdict::renewed: {
                        lease->renewed(
                            dlock::detail::valid_until(sent, due[i].request, config_.drift));
                        // A hand-off or partial grant (track()), extended on fewer than every
                        // server: a straggler's release may still hand its key to us there, with
                        // the short hand-off lease, while our queue entry there is live: until
                        // waiter_liveness after the attempt the grant counts from, which
                        // refreshed it last. Extend again every handoff_lease / 4 until one round
                        // has gone after that, so that key is kept too.
                        const auto queued_until = lease->granted_at() + waiter_liveness;
                        const bool straggler = due[i].extend_once && tally.ours < servers_.size() &&
                                               sent < queued_until + handoff_lease / 4;
                        registry_.schedule(lease.get(),
                                           straggler
                                               ? sent + handoff_lease / 4
                                               : dlock::detail::next_renewal_at(
                                                     lease->plan(), lease->granted_at(), sent),
                                           /*renewed=*/!straggler);
                        renewed.push_back(lease);
                        break;
                    }
                    case quorum::renew_verdict::lost:
                        // gone or another token on enough servers: no quorum can hold it
                        lost.emplace_back(lease, tally.taken > 0 ? lost_reason::taken_over
                                                                 : lost_reason::deleted);
                        registry_.untrack(lease.get());
                        break;
                    case quorum::renew_verdict::failed:
                        if (interrupted) {
                            registry_.schedule(lease.get(), now);
                            break;
                        }
                        if (lease->renewal_failed()) went_uncertain.push_back(lease);
                        registry_.schedule(lease.get(),
                                           now + dlock::detail::renewal_retry_delay(lease->plan()));
                        failed.emplace_back(lease, std::move(why));
                        break;
                }
            }
        }
        for (const auto& lease : renewed) {
            notify({event_kind::renewed, lease->name(), lease->fencing_token(), {}, steady::now()});
        }
        if (!interrupted) {
            for (const auto& b : batches) {
                if (!b.ec) continue;
                for (const auto& d : due)
                    report_node_failure(d.lease->name(), d.lease->fencing_token(), b);
            }
        }
        for (const auto& r : refused) {
            report_node_failure(r.lease->name(), r.lease->fencing_token(), batches[r.server],
                                r.why);
        }
        for (const auto& lease : went_uncertain) lease->report_renewal_failed();
        for (const auto& [lease, why] : failed) {
            const auto code = servers_.size() > 1  ? make_error_code(errc::quorum_unreachable)
                              : batches.front().ec ? batches.front().ec
                                                   : make_error_code(errc::server_error);
            report_error(code, "renewal of \"" + lease->name() +
                                   "\" failed; retrying until its lease runs out: " + why);
            notify({event_kind::error, lease->name(), lease->fencing_token(), code, steady::now()});
        }
        for (auto& [lease, reason] : lost) lease->lose(make_error_code(errc::lock_lost), reason);
    }
    dlock::detail::lock_guard lock(registry_mutex_);
    auto next = registry_.next_due();
    const auto now_after = steady::now();
    if (now_after - steady::time_point(steady::duration(last_active_.load())) < active_window)
        next = std::min(next, now_after + active_tick);
    // Published under registry_mutex_: a lease tracked after this sees it and wakes us if sooner.
    // An upper bound of the actual sleep (run() may cut it shorter), so wake_by() never misses.
    worker_wakes_at_.store(next.time_since_epoch().count());
    return next;
}

steady::time_point engine::retry_releases(steady::time_point now) {
    std::vector<pending_release> due;
    {
        dlock::detail::lock_guard lock(pending_mutex_);
        if (pending_releases_.empty()) return steady::time_point::max();
        const auto later = std::partition(
            pending_releases_.begin(), pending_releases_.end(),
            [&](const pending_release& p) { return p.until > now && p.next_try > now; });
        for (auto it = later; it != pending_releases_.end(); ++it) {
            if (it->until > now) due.push_back(std::move(*it));  // else: the key ran out
        }
        pending_releases_.erase(later, pending_releases_.end());
    }
    // Bounded like the renewals: no lease's loss is reported late for a retry's sake.
    auto latest = steady::time_point::max();
    {
        dlock::detail::lock_guard lock(registry_mutex_);
        latest = registry_.earliest_deadline();
    }
    std::vector<pending_release> again;
    for (auto& p : due) {
        round_plan plan{p.calls, /*renewals=*/true};
        plan.deadline = [&](steady::time_point own, steady::time_point) {
            return std::min(own, latest);
        };
        const auto run = run_on_every_server(plan);
        const auto& b = run.batches.front();
        // Any verdict ends it: deleted, already gone, or another owner's (nothing touched).
        if (!b.ec && b.replies.front().type == reply::kind::integer) continue;
        p.gap = std::min<std::chrono::milliseconds>(p.gap * 2, std::chrono::seconds(2));
        p.next_try = steady::now() + p.gap;
        if (p.next_try < p.until) again.push_back(std::move(p));
    }
    dlock::detail::lock_guard lock(pending_mutex_);
    for (auto& p : again) pending_releases_.push_back(std::move(p));
    auto next = steady::time_point::max();
    for (const auto& p : pending_releases_) next = std::min(next, p.next_try);
    return next;
}

void engine::run(std::stop_token stop) {
    std::vector<pollfd> fds;
    while (!stop.stop_requested()) {
        auto next = std::min(renew_due(steady::now()), retry_releases(steady::now()));
        // Sentinel: +switch-master on one sentinel (sentinel.hpp).
        int watch_fd = -1;
        if (config_.resolver) {
            watch_fd = config_.resolver->watch_service(steady::now());
            if (watch_fd < 0) next = std::min(next, config_.resolver->watch_retry());
        }
        // The wake-up, the watch, then each subscriber's connection (a negative fd is ignored).
        fds.assign({{wake_fd_.fd(), POLLIN, 0}, {watch_fd, POLLIN, 0}});
        for (auto& sub : subscribers_) {
            const int fd = sub->service(steady::now(), next);
            next = std::min(next, sub->next_retry());
            fds.push_back({fd, fd >= 0 ? sub->wanted_events() : short{POLLIN}, 0});
        }
        const int timeout_ms = dlock::detail::poll_timeout_ms(steady::now(), next);
        const int n = ::poll(fds.data(), fds.size(), timeout_ms);
        worker_wakes_at_.store(steady::time_point::min().time_since_epoch().count());
        if (n <= 0) continue;
        if (fds[0].revents & POLLIN) wake_fd_.drain();
        if (watch_fd >= 0 && fds[1].revents != 0) config_.resolver->watch_readable();
        for (std::size_t i = 0; i < subscribers_.size(); ++i)
            if (fds[2 + i].fd >= 0 && fds[2 + i].revents != 0) subscribers_[i]->on_readable();
    }
}

}  // namespace dlock::redis::detail
