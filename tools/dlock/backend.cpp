#include "backend.hpp"

#if DLOCK_HAS_ETCD
#include <dlock/etcd/client.hpp>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "process.hpp"

namespace dlock::cli {
namespace {

/// dlock::error's what() is "<detail>: <the code's message>"; the CLI words the second part
/// itself, so keep only the detail.
std::string detail_of(const dlock::error& e) {
    std::string what = e.what();
    const std::string suffix = ": " + e.code().message();
    if (what.size() > suffix.size() && what.ends_with(suffix))
        what.resize(what.size() - suffix.size());
    return what;
}

/// What remember_secret*() collected (main thread only).
std::vector<std::string>& remembered_secrets() {
    static std::vector<std::string> secrets;
    return secrets;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

void remember_secret(std::string_view secret) {
    // Shorter pieces would blank out ordinary words of messages; such a secret is no secret.
    if (secret.size() >= 3) remembered_secrets().emplace_back(secret);
}

void remember_secrets_of(std::string_view url) {
    for (const auto& [offset, length] : secret_spans(url)) {
        const auto secret = url.substr(offset, length);
        remember_secret(secret);
        std::string decoded;  // best effort: a message may quote the decoded form
        for (std::size_t i = 0; i < secret.size(); ++i) {
            if (secret[i] == '%' && i + 2 < secret.size() && hex_digit(secret[i + 1]) >= 0 &&
                hex_digit(secret[i + 2]) >= 0) {
                decoded +=
                    static_cast<char>(hex_digit(secret[i + 1]) * 16 + hex_digit(secret[i + 2]));
                i += 2;
            } else {
                decoded += secret[i];
            }
        }
        if (decoded != secret) remember_secret(decoded);
    }
}

std::string safe_message(std::string text) {
    auto secrets = remembered_secrets();
    // Longest first, so that a secret holding another is replaced whole.
    std::sort(secrets.begin(), secrets.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (const auto& secret : secrets) {
        for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
            text.replace(at, secret.size(), "***");
    }
    std::string out;
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            out += fmt::format("\\x{:02x}", u);
        } else {
            out += c;
        }
    }
    return out;
}

std::string default_url() {
    std::string url = env_value("DLOCK_URL");
    return url.empty() ? "redis://127.0.0.1:6379" : url;
}

std::vector<std::pair<std::size_t, std::size_t>> secret_spans(std::string_view url) {
    return dlock::url_secrets(url);
}

bool has_password(std::string_view url) { return !secret_spans(url).empty(); }

std::string with_password(std::string_view url, std::string_view password) {
    std::string scheme(dlock::url_scheme(url));
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (scheme != "redis" && scheme != "rediss" && scheme != "unix" && scheme != "redlock" &&
        scheme != "redis-sentinel" && scheme != "redis+sentinel" && scheme != "rediss-sentinel" &&
        scheme != "etcd" && scheme != "etcds") {
        throw cli_error(exit_status::usage,
                        fmt::format("--password-file and $DLOCK_PASSWORD apply to redis://, "
                                    "rediss://, unix://, redlock://, redis-sentinel://, etcd:// "
                                    "and etcds:// URLs only, not to {}",
                                    redact_url(url)));
    }
    try {
        return dlock::url_with_password(url, password);
    } catch (const dlock::error& e) {
        // "has a password already", or no scheme; the message quotes the URL redacted.
        throw cli_error(exit_status::usage,
                        fmt::format("{}: give the password once (in the URL, --password-file or "
                                    "$DLOCK_PASSWORD)",
                                    detail_of(e)));
    }
}

service_url parse_service_url(std::string_view url) {
    try {
        auto parsed = dlock::parse_service_url(url);
        return {.redlock = parsed.kind == dlock::service_kind::redlock,
                .servers = std::move(parsed.servers),
                .zk = parsed.kind == dlock::service_kind::zookeeper,
                .etcd = parsed.kind == dlock::service_kind::etcd};
    } catch (const dlock::error& e) {
        throw to_cli_error(e, url);
    }
}

std::string fault_tolerance_warning(std::string_view url) {
    const auto parsed = parse_service_url(url);
    if (!parsed.redlock || parsed.servers.size() >= 3) return {};
    return fmt::format(
        "warning: redlock:// with {} server{}: a grant needs {} of them, so one server down "
        "stops every lock (no fault tolerance); use 3 or more independent servers",
        parsed.servers.size(), parsed.servers.size() == 1 ? "" : "s",
        parsed.servers.size() == 1 ? "it" : "both");
}

lock_service::lock_service(const server_options& server, service_callbacks cb)
    : key_prefix_(server.key_prefix),
      connect_timeout_(server.connect_timeout),
      command_timeout_(server.command_timeout),
      tls_(server.tls) {
    const std::string& url = server.url;
    const std::string& key_prefix = server.key_prefix;
    try {
        auto parsed = dlock::parse_service_url(url);
        kind_ = parsed.kind;
        urls_ = std::move(parsed.servers);
        dlock::connect_options options{.connect_timeout = server.connect_timeout,
                                       .observer = std::move(cb.observer),
                                       .error_handler = std::move(cb.error_handler),
                                       .command_timeout = server.command_timeout,
                                       .tls = server.tls,
                                       .node_timeout = server.node_timeout};
        // zk:// and etcd:// URLs name their base path or key prefix themselves; --key-prefix is
        // for the Redis family.
        if (kind_ != dlock::service_kind::zookeeper && kind_ != dlock::service_kind::etcd)
            options.key_prefix = key_prefix;
        // gRPC (etcd://) prints its own log lines on stderr, e.g. for a refused TLS handshake,
        // which would break dlock's one-line errors; the library reports their cause itself.
        // gRPC reads GRPC_VERBOSITY once, when the client makes its channels, so it is set only
        // meanwhile (unless the user set it) and commands dlock runs do not inherit it.
        const bool quiet_grpc =
            kind_ == dlock::service_kind::etcd && std::getenv("GRPC_VERBOSITY") == nullptr;
        if (quiet_grpc) ::setenv("GRPC_VERBOSITY", "NONE", 0);
        try {
            backend_ = dlock::connect(url, std::move(options));
        } catch (...) {
            if (quiet_grpc) ::unsetenv("GRPC_VERBOSITY");
            throw;
        }
        if (quiet_grpc) ::unsetenv("GRPC_VERBOSITY");
    } catch (const dlock::error& e) {
        throw to_cli_error(e, url);
    }
}

std::string lock_service::etcd_key(const dlock::lease& lease) const {
#if DLOCK_HAS_ETCD
    if (const auto* etcd = dynamic_cast<const dlock::etcd::client*>(backend_.get()))
        return etcd->key_of(lease);
#else
    (void)lease;
#endif
    return {};
}

std::size_t lock_service::quorum() const noexcept {
    if (const auto* redlock = dynamic_cast<const dlock::redlock::client*>(backend_.get()))
        return redlock->quorum();
    return 1;
}

std::vector<dlock::redis::client*> lock_service::servers() {
    if (kind_ == dlock::service_kind::zookeeper || kind_ == dlock::service_kind::etcd) return {};
    if (auto* single = dynamic_cast<dlock::redis::client*>(backend_.get())) return {single};
    if (inspectors_.empty()) {
        for (const auto& u : urls_) {
            try {
                dlock::redis::client_options o{.url = u, .key_prefix = key_prefix_};
                if (tls_) {
                    // connect() made redlock://'s servers rediss:// for the TLS options.
                    if (o.url.starts_with("redis://")) o.url.insert(5, "s");
                    o.tls = *tls_;
                }
                if (connect_timeout_) o.connect_timeout = *connect_timeout_;
                if (command_timeout_) o.command_timeout = *command_timeout_;
                inspectors_.push_back(std::make_unique<dlock::redis::client>(std::move(o)));
            } catch (const dlock::error& e) {
                throw to_cli_error(e, u);
            }
        }
    }
    std::vector<dlock::redis::client*> out;
    for (const auto& c : inspectors_) out.push_back(c.get());
    return out;
}

dlock::redis::client& lock_service::first_redis_server(std::string_view what) {
    const auto all = servers();
    if (all.empty()) {
        throw cli_error(exit_status::unavailable,
                        fmt::format("{} needs a Redis server (redis://, unix:// or redlock://), "
                                    "not {}://",
                                    what,
                                    is_zk()     ? "zk"
                                    : is_etcd() ? "etcd"
                                                : "this"));
    }
    return *all.front();
}

int status_for(std::error_code ec) {
    using dlock::errc;
    if (ec.category() != dlock::category()) return exit_status::internal;
    // Comparisons rather than a switch: errc grows with the backends.
    if (ec == errc::invalid_argument) return exit_status::usage;
    if (dlock::is_contention(ec)) return exit_status::conflict;
    if (ec == errc::lock_lost) return exit_status::lock_lost;
    if (ec == errc::connection_failed || ec == errc::server_timeout ||
        ec == errc::quorum_unreachable) {
        return exit_status::unreachable;
    }
    if (ec == errc::auth_failed) return exit_status::auth_failed;
    if (ec == errc::protocol_error || ec == errc::unexpected_reply || ec == errc::server_error) {
        return exit_status::server_error;
    }
    if (ec == errc::unsupported) return exit_status::unavailable;
    return exit_status::internal;  // not_owner, or a code this build does not know
}

cli_error to_cli_error(const dlock::error& e, std::string_view url) {
    const int status = status_for(e.code());
    const std::string detail = detail_of(e);
    const std::string where = redact_url(url);
    switch (status) {
        case exit_status::unreachable:
            return {status, fmt::format("cannot reach the lock server at {}: {}", where, detail)};
        case exit_status::auth_failed:
            if (detail.find("NOPERM") != std::string::npos) {
                // Logged in, but the ACL user may not run a command, or touch a key or channel.
                return {status,
                        fmt::format("the lock server at {} refused a command: its ACL user lacks "
                                    "a permission dlock needs: {} (grant the minimal ACL of "
                                    "dlock's documentation, section \"Redis ACL\")",
                                    where, detail)};
            }
            return {
                status,
                fmt::format(
                    "the lock server at {} refused the credentials: {} "
                    "(give the password with --password-file FILE, $DLOCK_PASSWORD or in the URL: "
                    "redis://user:password@host:port, unix://user:password@/path)",
                    where, detail)};
        case exit_status::server_error:
            if (detail.find("READONLY") != std::string::npos) {
                return {status, fmt::format("the lock server at {} is a read-only replica: locks "
                                            "need the primary (master) server: {}",
                                            where, detail)};
            }
            if (detail.find("not a Redis server") != std::string::npos) {
                return {status, fmt::format("the lock server at {} is not a Redis server: {}",
                                            where, detail)};
            }
            return {status,
                    fmt::format("the lock server at {} answered unexpectedly: {}", where, detail)};
        default: return {status, detail};
    }
}

}  // namespace dlock::cli
