// `dlock status NAME`: what the lock server(s) know about one lock of any kind, from
// dlock::backend::inspect (docs/cli.md). The backend reads its own state (Redis: one read-only
// script; Redlock: every server and the quorum view; ZooKeeper: the lock node's children), so
// this file only formats the answer. `--watch` keeps the view up to date from
// dlock::backend::watch (notifications, no polling of the server): docs/cli.md.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "backend.hpp"
#include "cli.hpp"
#include "duration.hpp"

namespace dlock::cli {
namespace {

/// A name (or a key, a server's message) as the text views show it: control characters
/// (newline, ESC, the C1 range U+0080-U+009F), '\\' and '"' escaped C-style, so a name can
/// neither break a line nor send a terminal an escape sequence. JSON escapes them itself.
std::string shown(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        switch (c) {
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\\': out += "\\\\"; continue;
            case '"': out += "\\\""; continue;
            default: break;
        }
        if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
        } else if (c == 0xc2 && i + 1 < text.size() &&
                   static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[++i]));
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

/// A name is any bytes; JSON text is UTF-8: invalid sequences are printed as U+FFFD rather than
/// making dump() throw.
constexpr auto json_replace = nlohmann::json::error_handler_t::replace;

/// "mutex", "fair_mutex", ...: the type without the namespace, as JSON carries it.
std::string type_name(dlock::lock_type type) {
    std::string_view t = dlock::to_string(type);
    if (t.starts_with("dlock::")) t.remove_prefix(7);
    return std::string(t);
}

/// `session`: what a holder's grant lives by on ZooKeeper and etcd; null on Redis.
std::string lease_text(const dlock::lock_info& info, const char* session) {
    if (info.lease_left) {
        return fmt::format(", lease {} left", format_duration(*info.lease_left));
    }
    if (session != nullptr) return fmt::format(" (while the holder's {} lives)", session);
    return ", with no expiry (the key was not set by dlock)";
}

/// One line: free or held, and by whom.
std::string state_text(const dlock::lock_info& info, const char* session) {
    if (!info.error.empty()) return fmt::format("unknown: {}", shown(info.error));
    if (info.type == dlock::lock_type::foreign) {
        return fmt::format("foreign: {}", shown(info.detail));
    }
    const auto permits = [&] {
        return info.permit_limit
                   ? fmt::format("{} of {} permits in use", info.permits_in_use, *info.permit_limit)
                   : fmt::format("{} permits in use", info.permits_in_use);
    };
    if (!info.held) {
        if (info.type == dlock::lock_type::counting_semaphore) {
            return fmt::format("free ({})", permits());
        }
        return "free";
    }
    std::string who;
    switch (info.type) {
        case dlock::lock_type::shared_mutex:
            who = info.writer
                      ? " by a writer"
                      : fmt::format(" by {} reader{}", info.readers, info.readers == 1 ? "" : "s");
            break;
        case dlock::lock_type::counting_semaphore:
            who = fmt::format(": {} ({} grant{})", permits(), info.holders,
                              info.holders == 1 ? "" : "s");
            break;
        case dlock::lock_type::recursive_mutex: who = fmt::format(" (depth {})", info.depth); break;
        default: break;
    }
    return "held" + who + lease_text(info, session);
}

nlohmann::json optional_json(const auto& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json lease_json(const dlock::lock_info& info) {
    return info.lease_left ? nlohmann::json(info.lease_left->count()) : nlohmann::json(nullptr);
}

/// The fields every view has, for --json.
void view_json(nlohmann::json& j, const dlock::lock_info& info) {
    j["type"] = type_name(info.type);
    j["held"] = info.held;
    j["lease_remaining_ms"] = lease_json(info);
    j["fencing_counter"] = optional_json(info.fencing_counter);
    j["holders"] = info.holders;
    j["readers"] = info.readers;
    j["writer"] = info.writer;
    j["depth"] = info.depth;
    j["permits_in_use"] = info.permits_in_use;
    j["permit_limit"] = optional_json(info.permit_limit);
    j["waiters"] = info.waiters;
    j["subscribed_clients"] = info.subscribers;
    if (!info.detail.empty()) j["detail"] = info.detail;
}

/// What one view needs besides the lock_info: the service's shape and names.
struct view_context {
    const status_options& o;
    lock_service& service;
    bool zk = false;
    std::optional<std::string> lock_key{}, fence_key{}, channel{};
    bool etcd = false;
    /// What a holder's grant lives by (lease_text); null on Redis.
    const char* session() const noexcept {
        return zk ? "ZooKeeper session" : etcd ? "etcd lease" : nullptr;
    }
};

view_context make_context(const status_options& o, lock_service& service) {
    view_context c{o, service, service.is_zk()};
    c.etcd = service.is_etcd();
    // Key names (no reads): what a Redis user would look for with redis-cli.
    if (!c.zk && !c.etcd) {
        dlock::redis::client& first = service.first_redis_server("status");
        c.lock_key = first.lock_key(o.name);
        c.fence_key = first.fence_key(o.name);
        c.channel = first.release_channel(o.name);
    }
    return c;
}

dlock::lock_info read_info(const view_context& c) {
    try {
        return c.service.backend().inspect(c.o.name);
    } catch (const dlock::error& e) {
        throw to_cli_error(e, c.o.server.url);
    }
}

std::string server_url(const view_context& c, const dlock::lock_info& info, std::size_t i) {
    const auto& urls = c.service.server_urls();
    return i < urls.size() ? redact_url(urls[i]) : info.servers[i].server;
}

nlohmann::json json_view(const view_context& c, const dlock::lock_info& info) {
    nlohmann::json j = {
        {"name", c.o.name},
        {"url", redact_url(c.o.server.url)},
        {"backend", c.zk                     ? "zookeeper"
                    : c.etcd                 ? "etcd"
                    : c.service.is_redlock() ? "redlock"
                                             : "redis"},
    };
    view_json(j, info);
    if (c.lock_key) {
        j["keys"] = {
            {"lock", *c.lock_key}, {"fence", *c.fence_key}, {"release_channel", *c.channel}};
    }
    if (c.service.is_redlock()) {
        j["quorum"] = info.quorum;
        j["held_on_servers"] = info.held_on;
        std::size_t answered = 0;
        for (const auto& sv : info.servers) answered += sv.error.empty() ? 1 : 0;
        j["answered_servers"] = answered;
        j["servers"] = nlohmann::json::array();
        for (std::size_t i = 0; i < info.servers.size(); ++i) {
            const auto& s = info.servers[i];
            nlohmann::json js = {{"url", server_url(c, info, i)}};
            if (!s.error.empty()) {
                js["error"] = s.error;
            } else {
                view_json(js, s);
            }
            j["servers"].push_back(js);
        }
    }
    return j;
}

/// The state line: free or held, by whom, the lease left.
std::string overall_state(const view_context& c, const dlock::lock_info& info) {
    if (!c.service.is_redlock()) return state_text(info, c.session());
    if (info.held) {
        return fmt::format("held on {} of {} servers (quorum {}){}", info.held_on,
                           info.servers.size(), info.quorum,
                           info.lease_left
                               ? ", lease " + format_duration(*info.lease_left) + " left"
                               : std::string());
    }
    return fmt::format("free (held on {} of {} servers; quorum {})", info.held_on,
                       info.servers.size(), info.quorum);
}

/// Redlock: how many servers answered; a degraded quorum names those that did not, and why.
std::string answered_text(const view_context& c, const dlock::lock_info& info) {
    std::size_t answered = 0;
    std::string failed;
    for (std::size_t i = 0; i < info.servers.size(); ++i) {
        if (info.servers[i].error.empty()) {
            ++answered;
            continue;
        }
        failed += fmt::format("{}{}", failed.empty() ? "" : ", ", server_url(c, info, i));
    }
    if (failed.empty()) return fmt::format("all {} answered", info.servers.size());
    return fmt::format("{} of {} answered (degraded: {} did not; see below)", answered,
                       info.servers.size(), failed);
}

/// The human view, one line per field.
std::string text_view(const view_context& c, const dlock::lock_info& info) {
    const std::string counter_text =
        !info.fencing_counter ? std::string("none (never acquired, or the counter was deleted)")
        : c.zk   ? fmt::format("{} (the current holder's fencing token: its node's czxid)",
                               *info.fencing_counter)
        : c.etcd ? fmt::format("{} (the current holder's fencing token: its key's create revision)",
                               *info.fencing_counter)
                 : fmt::format("{} (the last fencing token handed out)", *info.fencing_counter);
    std::string out;
    out += fmt::format("lock \"{}\" on {}\n", shown(c.o.name), redact_url(c.o.server.url));
    out += fmt::format("  type:                {}\n", info.type == dlock::lock_type::none
                                                          ? "none (no lock state under this name)"
                                                          : dlock::to_string(info.type));
    out += fmt::format("  state:               {}\n", overall_state(c, info));
    if (c.service.is_redlock())
        out += fmt::format("  servers:             {}\n", answered_text(c, info));
    out += fmt::format("  waiters:             {} queued\n", info.waiters);
    out += fmt::format("  fencing counter:     {}\n", counter_text);
    if (!c.zk && !c.etcd) {
        out +=
            fmt::format("  subscribed clients:  {} (client connections waiting for its release)\n",
                        info.subscribers);
        out +=
            fmt::format("  keys:                {}, {}\n", shown(*c.lock_key), shown(*c.fence_key));
    }
    for (std::size_t i = 0; i < info.servers.size(); ++i) {
        out += fmt::format("  server {:<28} {}\n", server_url(c, info, i),
                           state_text(info.servers[i], c.session()));
    }
    return out;
}

// --- --watch ---

std::atomic<int> stop_signal{0};  // the SIGINT / SIGTERM that ends the watch, 0 while none

extern "C" void on_stop_signal(int sig) { stop_signal.store(sig); }

/// How often the watch looks at stop_signal and, on a terminal, redraws the lease countdown.
/// Local only: the server is asked only after a notification or when a known lease runs out.
constexpr auto tick = std::chrono::milliseconds(200);

/// Installs the handlers for the watch's lifetime; on a terminal hides the cursor, and shows it
/// again however the watch ends.
class watch_terminal {
public:
    explicit watch_terminal(bool tty) : tty_(tty) {
        stop_signal.store(0);
        struct sigaction action {};
        action.sa_handler = on_stop_signal;
        sigemptyset(&action.sa_mask);
        ::sigaction(SIGINT, &action, &old_int_);
        ::sigaction(SIGTERM, &action, &old_term_);
        if (tty_) std::fputs("\033[?25l", stdout);
    }
    ~watch_terminal() {
        if (tty_) std::fputs("\033[?25h", stdout);
        std::fflush(stdout);
        ::sigaction(SIGINT, &old_int_, nullptr);
        ::sigaction(SIGTERM, &old_term_, nullptr);
    }
    watch_terminal(const watch_terminal&) = delete;
    watch_terminal& operator=(const watch_terminal&) = delete;

private:
    bool tty_;
    struct sigaction old_int_ {};
    struct sigaction old_term_ {};
};

std::string clock_text() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::localtime_r(&now, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
    return buf;
}

/// The one-line form of a view (stdout not a terminal): what a script compares.
std::string line_view(const view_context& c, const dlock::lock_info& info) {
    return fmt::format(
        "{} {}: {}; fencing counter {}; waiters {}{}", clock_text(), shown(c.o.name),
        overall_state(c, info),
        info.fencing_counter ? std::to_string(*info.fencing_counter) : "none", info.waiters,
        c.zk || c.etcd ? std::string() : fmt::format("; subscribed clients {}", info.subscribers));
}

/// `info` without what changes by itself (the lease left counts down): two views that compare
/// equal are one state, printed once.
nlohmann::json state_key(const view_context& c, dlock::lock_info info) {
    info.lease_left.reset();
    for (auto& s : info.servers) s.lease_left.reset();
    return json_view(c, info);
}

int watch_status(const view_context& c) {
    const bool tty = ::isatty(STDOUT_FILENO) == 1;
    std::error_code ec;
    auto watch = c.service.backend().watch(c.o.name, ec);
    if (!watch) throw to_cli_error(dlock::error(ec, dlock::last_error_message(ec)), c.o.server.url);
    watch_terminal terminal(tty);
    using clock = std::chrono::steady_clock;
    dlock::lock_info info;
    clock::time_point read_at{};
    // When the lease shown runs out; max(): no lease shown.
    auto expires = clock::time_point::max();
    std::string changed_at;
    std::optional<nlohmann::json> printed;  // not a terminal: the state last printed
    bool stale = true;                      // read the server before drawing
    for (;;) {
        if (stale) {
            info = read_info(c);
            read_at = clock::now();
            changed_at = clock_text();
            expires = info.lease_left ? read_at + *info.lease_left : clock::time_point::max();
            stale = false;
            if (!tty) {
                auto key = state_key(c, info);
                if (!printed || key != *printed) {
                    if (c.o.json) {
                        std::printf("%s\n",
                                    json_view(c, info).dump(-1, ' ', false, json_replace).c_str());
                    } else {
                        std::printf("%s\n", line_view(c, info).c_str());
                    }
                    std::fflush(stdout);
                    printed = std::move(key);
                }
            }
        }
        if (tty) {
            // The countdown is drawn from the last read; the server is not asked again for it.
            dlock::lock_info shown = info;
            if (info.lease_left) {
                shown.lease_left =
                    std::max(std::chrono::milliseconds(0),
                             std::chrono::ceil<std::chrono::milliseconds>(expires - clock::now()));
            }
            std::string screen = "\033[H\033[2J" + text_view(c, shown);
            screen += fmt::format(
                "\nwatching: redrawn on each change (last change seen {}); Ctrl-C ends\n",
                changed_at);
            std::fputs(screen.c_str(), stdout);
            std::fflush(stdout);
        }
        if (stop_signal.load() != 0) break;
        bool notified = watch->wait_until(clock::now() + tick, ec);
        if (ec) throw to_cli_error(dlock::error(ec, dlock::last_error_message(ec)), c.o.server.url);
        if (stop_signal.load() != 0) break;
        // A lease that ran out ends the grant without any write the server reports at once
        // (Redis expires keys lazily or in its background cycle): read it when it is due.
        if (clock::now() >= expires) notified = true;
        if (notified) stale = true;
    }
    if (tty) std::fputs("\n", stdout);
    return exit_status::ok;
}

}  // namespace

int status_command(const status_options& o) {
    lock_service service(o.server);
    const view_context c = make_context(o, service);
    if (o.watch) return watch_status(c);
    const dlock::lock_info info = read_info(c);
    if (o.json) {
        std::printf("%s\n", json_view(c, info).dump(2, ' ', false, json_replace).c_str());
    } else {
        std::fputs(text_view(c, info).c_str(), stdout);
    }
    return info.held ? exit_status::ok : exit_status::not_held;
}

}  // namespace dlock::cli
