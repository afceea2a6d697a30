// `dlock status NAME`: what the lock server(s) know about one lock of any kind, from
// dlock::backend::inspect (docs/cli.md). The backend reads its own state (Redis: one read-only
// script; Redlock: every server and the quorum view; ZooKeeper: the lock node's children), so
// this file only formats the answer.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "backend.hpp"
#include "cli.hpp"
#include "duration.hpp"

namespace dlock::cli {
namespace {

/// "mutex", "fair_mutex", ...: the type without the namespace, as JSON carries it.
std::string type_name(dlock::lock_type type) {
    std::string_view t = dlock::to_string(type);
    if (t.starts_with("dlock::")) t.remove_prefix(7);
    return std::string(t);
}

std::string lease_text(const dlock::lock_info& info, bool zk) {
    if (info.lease_left) {
        return fmt::format(", lease {} left", format_duration(*info.lease_left));
    }
    if (zk) return " (while the holder's ZooKeeper session lives)";
    return ", with no expiry (the key was not set by dlock)";
}

/// One line: free or held, and by whom.
std::string state_text(const dlock::lock_info& info, bool zk) {
    if (!info.error.empty()) return fmt::format("unknown: {}", info.error);
    if (info.type == dlock::lock_type::foreign) {
        return fmt::format("foreign: {}", info.detail);
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
    return "held" + who + lease_text(info, zk);
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

}  // namespace

int status_command(const status_options& o) {
    lock_service service(o.server.url, o.server.key_prefix);
    const bool zk = service.is_zk();
    dlock::lock_info info;
    try {
        info = service.backend().inspect(o.name);
    } catch (const dlock::error& e) {
        throw to_cli_error(e, o.server.url);
    }
    // Key names (no reads): what a Redis user would look for with redis-cli.
    std::optional<std::string> lock_key, fence_key, channel;
    if (!zk) {
        dlock::redis::client& first = *service.servers().front();
        lock_key = first.lock_key(o.name);
        fence_key = first.fence_key(o.name);
        channel = first.release_channel(o.name);
    }
    const auto& urls = service.server_urls();
    const auto server_url = [&](std::size_t i) {
        return i < urls.size() ? redact_url(urls[i]) : info.servers[i].server;
    };

    if (o.json) {
        nlohmann::json j = {
            {"name", o.name},
            {"url", redact_url(o.server.url)},
            {"backend", zk                     ? "zookeeper"
                        : service.is_redlock() ? "redlock"
                                               : "redis"},
        };
        view_json(j, info);
        if (lock_key) {
            j["keys"] = {{"lock", *lock_key}, {"fence", *fence_key}, {"release_channel", *channel}};
        }
        if (service.is_redlock()) {
            j["quorum"] = info.quorum;
            j["held_on_servers"] = info.held_on;
            j["servers"] = nlohmann::json::array();
            for (std::size_t i = 0; i < info.servers.size(); ++i) {
                const auto& s = info.servers[i];
                nlohmann::json js = {{"url", server_url(i)}};
                if (!s.error.empty()) {
                    js["error"] = s.error;
                } else {
                    view_json(js, s);
                }
                j["servers"].push_back(js);
            }
        }
        std::printf("%s\n", j.dump(2).c_str());
        return exit_status::ok;
    }

    std::string state;
    if (!service.is_redlock()) {
        state = state_text(info, zk);
    } else if (info.held) {
        state =
            fmt::format("held on {} of {} servers (quorum {}){}", info.held_on, info.servers.size(),
                        info.quorum,
                        info.lease_left ? ", lease " + format_duration(*info.lease_left) + " left"
                                        : std::string());
    } else {
        state = fmt::format("free (held on {} of {} servers; quorum {})", info.held_on,
                            info.servers.size(), info.quorum);
    }
    const std::string counter_text =
        !info.fencing_counter ? std::string("none (never acquired, or the counter was deleted)")
        : zk ? fmt::format("{} (the current holder's fencing token: its node's czxid)",
                           *info.fencing_counter)
             : fmt::format("{} (the last fencing token handed out)", *info.fencing_counter);
    std::printf("lock \"%s\" on %s\n", o.name.c_str(), redact_url(o.server.url).c_str());
    std::printf("  type:                %s\n", info.type == dlock::lock_type::none
                                                   ? "none (no lock state under this name)"
                                                   : dlock::to_string(info.type));
    std::printf("  state:               %s\n", state.c_str());
    std::printf("  waiters:             %u queued\n", info.waiters);
    std::printf("  fencing counter:     %s\n", counter_text.c_str());
    if (!zk) {
        std::printf("  subscribed clients:  %u (client connections waiting for its release)\n",
                    info.subscribers);
        std::printf("  keys:                %s, %s\n", lock_key->c_str(), fence_key->c_str());
    }
    for (std::size_t i = 0; i < info.servers.size(); ++i) {
        std::printf("  server %-28s %s\n", server_url(i).c_str(),
                    state_text(info.servers[i], zk).c_str());
    }
    return exit_status::ok;
}

}  // namespace dlock::cli
