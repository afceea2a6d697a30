#include "redis/sentinel.hpp"

#include <algorithm>
#include <charconv>
#include <functional>
#include <thread>

#include "core/status.hpp"
#include "core/url.hpp"
#include "redis/connection.hpp"

namespace dlock::redis::detail {

using dlock::detail::deadline_after;
using dlock::detail::fail;
using dlock::detail::redis_endpoint;

namespace {

constexpr std::uint16_t default_sentinel_port = 26379;
/// Pause between two rounds over every sentinel while no verified master is found (a failover in
/// progress): short against the failover itself (seconds), long enough not to spin.
constexpr std::chrono::milliseconds ask_again_pause{100};
/// Resubscription to +switch-master after a failure.
constexpr std::chrono::milliseconds watch_backoff{500};

bool parse_count(std::string_view text, long long high, long long& out) {
    if (text.empty()) return false;
    const auto* end = text.data() + text.size();
    const auto [ptr, err] = std::from_chars(text.data(), end, out);
    return err == std::errc{} && ptr == end && out >= 0 && out <= high;
}

/// "50ms", "2s", "1m" or a bare number of milliseconds.
bool parse_ms(std::string_view text, std::chrono::milliseconds& out) {
    long long scale = 1;
    if (text.ends_with("ms")) {
        text.remove_suffix(2);
    } else if (text.ends_with("s")) {
        text.remove_suffix(1);
        scale = 1000;
    } else if (text.ends_with("m")) {
        text.remove_suffix(1);
        scale = 60'000;
    }
    long long n = 0;
    if (!parse_count(text, 24LL * 3600 * 1000 / scale, n)) return false;
    out = std::chrono::milliseconds(n * scale);
    return true;
}

bool parse_flag(std::string_view text, bool& out) {
    if (text == "1" || text == "true" || text == "yes") return out = true, true;
    if (text == "0" || text == "false" || text == "no") return out = false, true;
    return false;
}

std::string scheme_of(std::string_view lowered) {
    return std::string(lowered.substr(0, lowered.find("://")));
}

}  // namespace

bool is_sentinel_url(std::string_view url) noexcept {
    const auto scheme = dlock::detail::url_scheme(url);
    return dlock::detail::iequals(scheme, "redis-sentinel") ||
           dlock::detail::iequals(scheme, "redis+sentinel") ||
           dlock::detail::iequals(scheme, "rediss-sentinel");
}

sentinel_settings parse_sentinel_url(std::string_view written, std::error_code& ec) {
    ec.clear();
    sentinel_settings out;
    const auto bad = [&](const std::string& why) {
        fail(ec, errc::invalid_argument,
             "URL \"" + dlock::detail::redact_url(written) + "\": " + why);
        return sentinel_settings{};
    };
    const std::string lowered = dlock::detail::lower_scheme(written);
    if (!is_sentinel_url(lowered))
        return bad("expected redis-sentinel://host[:port],.../master-name");
    out.tls = scheme_of(lowered) == "rediss-sentinel";
    std::string_view rest = std::string_view(lowered).substr(lowered.find("://") + 3);

    // The user-info ends at the last '@' (core/url.hpp); it is the master's, parsed by the Redis
    // URL parser below together with the query (db, user, password).
    std::string_view userinfo;
    if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
        userinfo = rest.substr(0, at + 1);
        rest = rest.substr(at + 1);
    }
    if (rest.find('#') != std::string_view::npos) return bad("a fragment (#...) is not allowed");
    const auto question = rest.find('?');
    const auto query =
        question == std::string_view::npos ? std::string_view{} : rest.substr(question + 1);
    rest = rest.substr(0, question);
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos || slash + 1 >= rest.size())
        return bad("missing the master's name (redis-sentinel://host:port,.../master-name)");
    const auto hosts = rest.substr(0, slash);
    auto path = rest.substr(slash + 1);
    std::string_view db_part;
    if (const auto second = path.find('/'); second != std::string_view::npos) {
        db_part = path.substr(second + 1);
        path = path.substr(0, second);
    }
    if (!dlock::detail::percent_decode(path, out.master_name) || out.master_name.empty())
        return bad("bad master name");
    for (const char c : out.master_name) {
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
            return bad("invalid master name \"" + dlock::detail::printable(out.master_name) + "\"");
    }

    // The Sentinel-only query options; the rest (db, user, password) is the master's.
    std::string master_query;
    std::string sentinel_user;
    std::string sentinel_password;
    bool sentinel_auth = false;
    for (const auto& item : dlock::detail::query_items(query)) {
        std::string value;
        const bool ok =
            item.key_decoded && item.has_value && dlock::detail::percent_decode(item.value, value);
        const auto key = item.key;
        const auto option_bad = [&](const std::string& why) {
            return bad(why +
                       " (Sentinel query options: wait_replicas=K, wait_timeout=DURATION, "
                       "wait_aof=0|1, failover_wait=DURATION, sentinel_user=NAME, "
                       "sentinel_password=SECRET, and db, user, password for the master; "
                       "rediss-sentinel:// also tls_ca, tls_ca_dir, tls_cert, tls_key, "
                       "tls_server_name, tls_insecure)");
        };
        if (ok && dlock::detail::iequals(key, "wait_replicas")) {
            long long k = 0;
            if (!parse_count(value, 1000, k))
                return option_bad("wait_replicas=" + dlock::detail::printable(value) +
                                  " is not a number in 0..1000");
            out.wait_replicas = static_cast<std::uint32_t>(k);
        } else if (ok && dlock::detail::iequals(key, "wait_timeout")) {
            if (!parse_ms(value, out.wait_timeout) || out.wait_timeout.count() == 0)
                return option_bad("wait_timeout=" + dlock::detail::printable(value) +
                                  " is not a positive duration (e.g. 50ms, 1s)");
        } else if (ok && dlock::detail::iequals(key, "failover_wait")) {
            if (!parse_ms(value, out.failover_wait) || out.failover_wait.count() == 0)
                return option_bad("failover_wait=" + dlock::detail::printable(value) +
                                  " is not a positive duration (e.g. 30s)");
        } else if (ok && dlock::detail::iequals(key, "wait_aof")) {
            if (!parse_flag(value, out.wait_aof)) return option_bad("wait_aof takes 0 or 1");
        } else if (ok && dlock::detail::iequals(key, "sentinel_user")) {
            sentinel_user = value;
        } else if (ok && dlock::detail::iequals(key, "sentinel_password")) {
            sentinel_password = value;
            sentinel_auth = true;
        } else {
            // The master's options, or a bad item: the Redis URL parser says which.
            master_query += (master_query.empty() ? "" : "&") +
                            std::string(item.key_decoded ? item.key : std::string("%"));
            if (item.has_value) master_query += "=" + std::string(item.value);
        }
    }
    if (out.wait_replicas > 0 && out.wait_timeout.count() == 0)
        return bad("wait_replicas needs wait_timeout (how long a grant waits for the replicas)");
    if (out.wait_aof && out.wait_replicas == 0) return bad("wait_aof needs wait_replicas");

    // The master's credentials and database: one Redis URL's worth, parsed by the Redis parser.
    // rediss-sentinel:// takes rediss://'s tls_* options (docs/tls.md), for the sentinels and
    // the master alike.
    std::string master_url =
        std::string(out.tls ? "rediss://" : "redis://") + std::string(userinfo) + "master";
    if (!db_part.empty()) master_url += "/" + std::string(db_part);
    if (!master_query.empty()) master_url += "?" + master_query;
    std::error_code master_ec;
    out.master = dlock::detail::parse_redis_url(master_url, master_ec);
    if (master_ec) {
        auto why = dlock::detail::message_for(master_ec);
        const auto colon = why.find("\": ");  // the message quotes the inner URL: drop it
        return bad(colon == std::string::npos ? why : why.substr(colon + 3));
    }
    out.master.host.clear();
    out.master.port = 0;
    if (out.tls) out.master.kind = redis_endpoint::transport::tls;

    if (hosts.empty()) return bad("no sentinel given");
    for (std::size_t begin = 0; begin <= hosts.size();) {
        auto end = hosts.find(',', begin);
        if (end == std::string_view::npos) end = hosts.size();
        const auto one = hosts.substr(begin, end - begin);
        if (one.empty()) return bad("an empty sentinel address");
        std::error_code host_ec;
        auto ep = dlock::detail::parse_redis_url("redis://" + std::string(one), host_ec);
        if (host_ec) {
            return bad("sentinel \"" + dlock::detail::printable(one) +
                       "\": expected host[:port] ([v6]:port for IPv6)");
        }
        const bool port_given =
            one.back() != ']' &&
            one.find(':', one.rfind(']') == one.npos ? 0 : one.rfind(']')) != one.npos;
        if (!port_given) ep.port = default_sentinel_port;
        ep.user = sentinel_user;
        ep.password = sentinel_password;
        ep.has_password = sentinel_auth;
        if (out.tls) {
            ep.kind = redis_endpoint::transport::tls;
            ep.tls = out.master.tls;
        }
        for (const auto& seen : out.sentinels) {
            if (seen.describe() == ep.describe())
                return bad("sentinel " + ep.describe() + " is listed more than once");
        }
        out.sentinels.push_back(std::move(ep));
        begin = end + 1;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------

struct master_resolver::state {
    dlock::detail::mutex discover_mutex;  // one discovery at a time; taken before `mutex`
    dlock::detail::mutex mutex;
    std::optional<redis_endpoint> master DLOCK_GUARDED_BY(mutex);
    bool suspected DLOCK_GUARDED_BY(mutex) = false;
    std::size_t next_sentinel DLOCK_GUARDED_BY(mutex) = 0;  // the last one that answered
    std::function<void()> changed DLOCK_GUARDED_BY(mutex);
    std::string last_failure DLOCK_GUARDED_BY(mutex);  // of the latest discovery
    // Per sentinel, the last answer that was not a timeout ("" before any): what a timed-out
    // attempt's message adds.
    std::vector<std::string> answers DLOCK_GUARDED_BY(discover_mutex);

    // +switch-master (background thread only).
    std::unique_ptr<connection> watch;
    std::size_t watch_sentinel = 0;
};

master_resolver::master_resolver(sentinel_settings settings,
                                 std::chrono::milliseconds connect_timeout,
                                 std::chrono::milliseconds command_timeout)
    : settings_(std::move(settings)),
      connect_timeout_(connect_timeout),
      command_timeout_(command_timeout),
      state_(std::make_unique<state>()) {}

master_resolver::~master_resolver() = default;

std::string master_resolver::describe() const {
    std::string out = "master \"" + settings_.master_name + "\" (sentinels ";
    for (std::size_t i = 0; i < settings_.sentinels.size(); ++i)
        out += (i ? "," : "") + settings_.sentinels[i].describe();
    return out + ")";
}

std::optional<redis_endpoint> master_resolver::known() const {
    dlock::detail::lock_guard lock(state_->mutex);
    return state_->master;
}

std::string master_resolver::last_failure() const {
    dlock::detail::lock_guard lock(state_->mutex);
    return state_->last_failure;
}

void master_resolver::on_change(std::function<void()> changed) {
    dlock::detail::lock_guard lock(state_->mutex);
    state_->changed = std::move(changed);
}

bool master_resolver::suspect(const redis_endpoint& seen) noexcept {
    try {
        {
            dlock::detail::lock_guard lock(state_->mutex);
            if (!state_->master || state_->master->describe() != seen.describe()) return true;
            state_->suspected = true;
        }
        std::error_code ec;
        const auto now = master(deadline_after(steady::now(), connect_timeout_), ec);
        return !ec && now.describe() != seen.describe();
    } catch (...) {
        return false;  // out of memory: the next failure asks again
    }
}

redis_endpoint master_resolver::master(steady::time_point deadline, std::error_code& ec) {
    {
        dlock::detail::lock_guard lock(state_->mutex);
        if (state_->master && !state_->suspected) return *state_->master;
    }
    dlock::detail::lock_guard one_at_a_time(state_->discover_mutex);
    {
        // Another caller may have found it while we waited for the discovery.
        dlock::detail::lock_guard lock(state_->mutex);
        if (state_->master && !state_->suspected) return *state_->master;
    }
    std::string why;
    state_->answers.resize(settings_.sentinels.size());
    if (!discover(deadline, why, state_->answers)) {
        const auto what = "redis sentinel: " + describe() + ": " + why;
        {
            dlock::detail::lock_guard lock(state_->mutex);
            state_->last_failure = what;
        }
        fail(ec, errc::connection_failed, what);
        return {};
    }
    dlock::detail::lock_guard lock(state_->mutex);
    return *state_->master;
}

bool master_resolver::discover(steady::time_point deadline, std::string& why,
                               std::vector<std::string>& answers) {
    std::size_t first = 0;
    {
        dlock::detail::lock_guard lock(state_->mutex);
        first = state_->next_sentinel;
    }
    const auto n = settings_.sentinels.size();
    const auto clamp = [](std::chrono::milliseconds left, std::chrono::milliseconds own) {
        return std::max(std::chrono::milliseconds(1), std::min(left, own));
    };
    for (;;) {
        std::string round;
        const auto add = [&](const std::string& what) {
            round += (round.empty() ? "" : "; ") + what;
        };
        const auto note = [&](std::size_t i, const std::string& what) {
            add(what);
            answers[i] = what;
        };
        for (std::size_t k = 0; k < n; ++k) {
            const auto i = (first + k) % n;
            const auto now = steady::now();
            if (now >= deadline) break;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
            connection sentinel(std::make_shared<const connection_settings>(
                connection_settings{settings_.sentinels[i], clamp(left, connect_timeout_),
                                    clamp(left, command_timeout_), "dlock:sentinel"}));
            std::error_code ec;
            const auto r = sentinel.execute(
                {"SENTINEL", "get-master-addr-by-name", settings_.master_name}, ec);
            const auto where = settings_.sentinels[i].describe() + ": ";
            if (ec == errc::server_timeout) {
                // Not an answer (maybe an attempt the deadline cut short): noted with the last.
                add(dlock::detail::message_for(ec) +
                    (answers[i].empty() ? "" : " (the last answer it gave: " + answers[i] + ")"));
                continue;
            }
            if (ec) {
                note(i, dlock::detail::message_for(ec));
                continue;
            }
            if (r.type == reply::kind::nil ||
                (r.type == reply::kind::array && r.elements.empty())) {
                note(i, where + "knows no master named \"" + settings_.master_name + "\"");
                continue;
            }
            long long port = 0;
            if (r.type != reply::kind::array || r.elements.size() != 2 ||
                !parse_count(r.elements[1].text, 65535, port) || port == 0) {
                note(i, where + "unexpected answer " +
                            (r.is_error() ? r.text : std::string(to_string(r.type))));
                continue;
            }
            auto candidate = settings_.master;
            candidate.host = r.elements[0].text;
            candidate.port = static_cast<std::uint16_t>(port);
            // Verify: the sentinels may still name a master that died or was demoted.
            connection check(std::make_shared<const connection_settings>(
                connection_settings{candidate, clamp(left, connect_timeout_),
                                    clamp(left, command_timeout_), "dlock:sentinel-check"}));
            const auto role = check.execute({"ROLE"}, ec);
            if (ec) {
                note(i, where + "names " + candidate.describe() +
                            ", which fails: " + dlock::detail::message_for(ec));
                continue;
            }
            if (role.type != reply::kind::array || role.elements.empty() ||
                role.elements[0].text != "master") {
                note(i, where + "names " + candidate.describe() + ", whose ROLE is " +
                            (role.type == reply::kind::array && !role.elements.empty()
                                 ? role.elements[0].text
                                 : role.text) +
                            ", not master");
                continue;
            }
            std::function<void()> changed;
            {
                dlock::detail::lock_guard lock(state_->mutex);
                if (!state_->master || state_->master->describe() != candidate.describe()) {
                    state_->master = std::move(candidate);
                    changed = state_->changed;
                }
                state_->suspected = false;
                state_->next_sentinel = i;
                state_->last_failure.clear();
            }
            if (changed) changed();
            return true;
        }
        if (!round.empty()) why = round;
        if (why.empty()) why = "no sentinel could be asked before the deadline";
        if (steady::now() + ask_again_pause >= deadline) return false;
        std::this_thread::sleep_for(ask_again_pause);
    }
}

sentinel_address::sentinel_address(std::shared_ptr<master_resolver> resolver)
    : resolver_(std::move(resolver)) {
    // While no master is known: an address that fails at once (no DNS lookup, no timeout), so
    // the first use reports it and asks the sentinels again (suspect).
    placeholder_ = resolver_->settings().master;
    placeholder_.kind = redis_endpoint::transport::unix_socket;
    placeholder_.path = "/dev/null/no-sentinel-master-known-yet";
}

redis_endpoint sentinel_address::current() const {
    if (auto known = resolver_->known()) return *known;
    std::error_code ec;
    auto found = resolver_->master(deadline_after(steady::now(), resolver_->connect_timeout()), ec);
    return ec ? placeholder_ : found;
}

bool sentinel_address::suspect(const redis_endpoint& seen, std::string_view /*why*/) noexcept {
    return resolver_->suspect(seen);
}

void sentinel_address::on_change(const std::function<void()>& changed) {
    resolver_->on_change(changed);
}

int master_resolver::watch_service(steady::time_point now) {
    auto& s = *state_;
    if (s.watch && s.watch->is_open()) return s.watch->native_handle();
    if (now < watch_retry_) return -1;
    const auto n = settings_.sentinels.size();
    s.watch_sentinel = (s.watch_sentinel + (s.watch ? 1 : 0)) % n;
    s.watch = std::make_unique<connection>(std::make_shared<const connection_settings>(
        connection_settings{settings_.sentinels[s.watch_sentinel], connect_timeout_,
                            command_timeout_, "dlock:sentinel-watch"}));
    std::error_code ec;
    s.watch->send({"SUBSCRIBE", "+switch-master"}, ec);
    if (ec) {
        s.watch->close();
        watch_retry_ = now + watch_backoff;
        return -1;
    }
    watch_retry_ = steady::time_point::min();
    return s.watch->native_handle();
}

void master_resolver::watch_readable() {
    auto& s = *state_;
    if (!s.watch) return;
    bool switched = false;
    for (;;) {
        reply r;
        std::error_code ec;
        if (!s.watch->receive(r, steady::now(), ec)) {
            if (ec) {
                s.watch->close();
                watch_retry_ = steady::now() + watch_backoff;
            }
            break;
        }
        // ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"]
        if (r.type == reply::kind::array && r.elements.size() == 3 &&
            r.elements[0].text == "message" &&
            r.elements[2].text.starts_with(settings_.master_name + " "))
            switched = true;
    }
    if (!switched) return;
    {
        dlock::detail::lock_guard lock(state_->mutex);
        state_->suspected = true;
    }
    std::error_code ec;
    master(deadline_after(steady::now(), connect_timeout_), ec);  // best effort
}

}  // namespace dlock::redis::detail
