// `dlock status NAME`: what the lock server(s) know about one lock, read with plain commands on
// the keys the client names (docs/redis-lock.md, "Keys and hash tags"). With Redlock every server
// is read, and the lock counts as held when a quorum of them has its key.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "backend.hpp"
#include "cli.hpp"
#include "duration.hpp"

namespace dlock::cli {
namespace {

using dlock::redis::reply;

reply checked(dlock::redis::client& client, const std::vector<std::string>& args) {
    reply r = client.command(args);
    if (r.is_error()) {
        throw dlock::error(dlock::errc::server_error, fmt::format("{}: {}", args.front(), r.text));
    }
    return r;
}

/// One server's view of the lock.
struct server_status {
    std::string url{};
    bool held = false;
    std::optional<std::int64_t> lease_left_ms{};  // unset: free, or held with no expiry
    std::string key_type{};                       // "string" for a dlock lock
    std::optional<std::uint64_t> fencing_counter{};
    std::int64_t subscribed_clients = 0;
    std::optional<dlock::error> error{};  // the server could not be read
};

server_status read_server(dlock::redis::client& client, const std::string& name) {
    server_status s;
    const std::string lock_key = client.lock_key(name);
    const std::string fence_key = client.fence_key(name);
    const reply pttl = checked(client, {"PTTL", lock_key});
    if (pttl.type != reply::kind::integer) {
        throw dlock::error(dlock::errc::unexpected_reply, "PTTL did not answer an integer");
    }
    s.held = pttl.integer != -2;  // -2: no such key; -1: a key without expiry
    if (pttl.integer >= 0) s.lease_left_ms = pttl.integer;
    if (s.held) s.key_type = checked(client, {"TYPE", lock_key}).text;

    const reply fence = checked(client, {"GET", fence_key});
    if (!fence.is_nil()) {
        try {
            s.fencing_counter = std::stoull(fence.text);
        } catch (const std::exception&) {
            throw dlock::error(dlock::errc::unexpected_reply,
                               fmt::format("{} holds \"{}\", not a number", fence_key, fence.text));
        }
    }
    // Counts connections subscribed to the release channel: one per waiting *client* (a
    // process's waiters share its subscriber connection), not one per waiting thread.
    const reply numsub = checked(client, {"PUBSUB", "NUMSUB", client.release_channel(name)});
    if (numsub.type == reply::kind::array && numsub.elements.size() == 2 &&
        numsub.elements[1].type == reply::kind::integer) {
        s.subscribed_clients = numsub.elements[1].integer;
    }
    return s;
}

std::string state_text(const server_status& s, const std::string& lock_key) {
    if (s.error) return fmt::format("unknown: {}", s.error->what());
    if (!s.held) return "free";
    if (s.key_type != "string") {
        return fmt::format("key {} exists but is a {}, not a dlock lock", lock_key, s.key_type);
    }
    if (s.lease_left_ms) {
        return fmt::format("held, lease {} left",
                           format_duration(std::chrono::milliseconds(*s.lease_left_ms)));
    }
    return "held, with no expiry (the key was not set by dlock)";
}

nlohmann::json optional_json(const auto& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

int status_command(const status_options& o) {
    lock_service service(o.server.url, o.server.key_prefix);
    if (service.is_zk()) {
        throw cli_error(exit_status::unavailable,
                        "dlock status: zk:// locks cannot be inspected yet (their queue is the "
                        "children of <base>/<name>)");
    }
    const auto servers = service.servers();
    std::vector<server_status> all;
    for (std::size_t i = 0; i < servers.size(); ++i) {
        try {
            all.push_back(read_server(*servers[i], o.name));
        } catch (const dlock::error& e) {
            // A single server's failure is the whole answer; one of N Redlock servers is not.
            if (!service.is_redlock()) throw to_cli_error(e, o.server.url);
            all.push_back({.error = e});
        }
        all.back().url = service.server_urls()[i];
    }
    const auto readable = std::count_if(all.begin(), all.end(), [](auto& s) { return !s.error; });
    if (readable == 0) throw to_cli_error(*all.front().error, all.front().url);

    // Summary over the servers: held on a quorum; the lease left on a quorum; the largest
    // counter (the next token will exceed it); the most subscribers on one server.
    const std::size_t quorum = service.quorum();
    std::vector<std::int64_t> leases;
    std::size_t held_on = 0;
    std::optional<std::uint64_t> counter;
    std::int64_t subscribed = 0;
    for (const auto& s : all) {
        if (s.held) ++held_on;
        if (s.held) leases.push_back(s.lease_left_ms.value_or(-1));
        if (s.fencing_counter) counter = std::max(counter.value_or(0), *s.fencing_counter);
        subscribed = std::max(subscribed, s.subscribed_clients);
    }
    const bool held = held_on >= quorum;
    std::optional<std::int64_t> lease_left;
    if (held) {
        std::sort(leases.begin(), leases.end(), std::greater<>());
        if (leases[quorum - 1] >= 0) lease_left = leases[quorum - 1];
    }
    dlock::redis::client& first = *servers.front();
    const std::string lock_key = first.lock_key(o.name);
    const std::string fence_key = first.fence_key(o.name);

    if (o.json) {
        nlohmann::json j = {
            {"name", o.name},
            {"url", redact_url(o.server.url)},
            {"backend", service.is_redlock() ? "redlock" : "redis"},
            {"held", held},
            {"lease_remaining_ms", optional_json(lease_left)},
            {"fencing_counter", optional_json(counter)},
            {"subscribed_clients", subscribed},
            {"keys",
             {{"lock", lock_key},
              {"fence", fence_key},
              {"release_channel", first.release_channel(o.name)}}},
        };
        if (!service.is_redlock() && held && all.front().key_type != "string") {
            j["lock_key_type"] = all.front().key_type;
        }
        if (service.is_redlock()) {
            j["quorum"] = quorum;
            j["held_on_servers"] = held_on;
            for (const auto& s : all) {
                nlohmann::json js = {{"url", redact_url(s.url)}};
                if (s.error) {
                    js["error"] = s.error->what();
                } else {
                    js["held"] = s.held;
                    js["lease_remaining_ms"] = optional_json(s.lease_left_ms);
                    js["fencing_counter"] = optional_json(s.fencing_counter);
                    js["subscribed_clients"] = s.subscribed_clients;
                }
                j["servers"].push_back(js);
            }
        }
        std::printf("%s\n", j.dump(2).c_str());
        return exit_status::ok;
    }

    std::string state;
    if (!service.is_redlock()) {
        state = state_text(all.front(), lock_key);
    } else if (held) {
        state = fmt::format(
            "held on {} of {} servers (quorum {}){}", held_on, all.size(), quorum,
            lease_left
                ? ", lease " + format_duration(std::chrono::milliseconds(*lease_left)) + " left"
                : std::string());
    } else {
        state = fmt::format("free (its key is on {} of {} servers; quorum {})", held_on, all.size(),
                            quorum);
    }
    const std::string counter_text =
        counter ? fmt::format("{} (the last fencing token handed out)", *counter)
                : std::string("none (never acquired, or the counter was deleted)");
    std::printf("lock \"%s\" on %s\n", o.name.c_str(), redact_url(o.server.url).c_str());
    std::printf("  state:               %s\n", state.c_str());
    std::printf("  fencing counter:     %s\n", counter_text.c_str());
    std::printf("  subscribed clients:  %lld (client connections waiting for its release)\n",
                static_cast<long long>(subscribed));
    std::printf("  keys:                %s, %s\n", lock_key.c_str(), fence_key.c_str());
    if (service.is_redlock()) {
        for (const auto& s : all) {
            std::printf("  server %-28s %s\n", redact_url(s.url).c_str(),
                        state_text(s, lock_key).c_str());
        }
    }
    return exit_status::ok;
}

}  // namespace dlock::cli
