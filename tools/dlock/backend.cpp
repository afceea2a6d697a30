#include "backend.hpp"

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

/// The library names its option fields (client_options.url); on the command line they are flags.
std::string as_flags(std::string text) {
    const std::pair<std::string_view, std::string_view> renames[] = {
        {"redlock client_options.urls", "--url"},
        {"client_options.urls", "--url"},
        {"client_options.url", "--url"},
        {"client_options.key_prefix", "--key-prefix"}};
    for (const auto& [from, to] : renames) {
        if (text.starts_with(from)) text.replace(0, from.size(), to);
    }
    return text;
}

}  // namespace

std::string default_url() {
    std::string url = env_value("DLOCK_URL");
    return url.empty() ? "redis://127.0.0.1:6379" : url;
}

std::optional<std::pair<std::size_t, std::size_t>> password_span(std::string_view url) {
    // The same reading as redact_url(): "user:password@" or a lone "password@".
    const auto start = url.find("://");
    if (start == std::string_view::npos) return std::nullopt;
    const auto authority_begin = start + 3;
    const auto authority_end = std::min(url.find_first_of("/?", authority_begin), url.size());
    const auto at = url.substr(0, authority_end).rfind('@');
    if (at == std::string_view::npos || at < authority_begin) return std::nullopt;
    const auto colon = url.substr(0, at).find(':', authority_begin);
    const auto begin = colon != std::string_view::npos ? colon + 1 : authority_begin;
    if (begin >= at) return std::nullopt;  // "user:@" or "@": no password
    return std::pair{begin, at - begin};
}

bool has_password(std::string_view url) { return password_span(url).has_value(); }

std::string with_password(std::string_view url, std::string_view password) {
    const auto start = url.find("://");
    const auto scheme = start == std::string_view::npos ? url : url.substr(0, start);
    if (scheme != "redis" && scheme != "redlock") {
        throw cli_error(exit_status::usage,
                        fmt::format("--password-file and $DLOCK_PASSWORD apply to redis:// and "
                                    "redlock:// URLs only, not to {}",
                                    redact_url(url)));
    }
    const auto authority_begin = start + 3;
    const auto authority_end = std::min(url.find_first_of("/?", authority_begin), url.size());
    const auto at = url.substr(0, authority_end).rfind('@');
    std::string user;
    std::size_t rest = authority_begin;
    if (at != std::string_view::npos && at >= authority_begin) {
        const auto userinfo = url.substr(authority_begin, at - authority_begin);
        const auto colon = userinfo.find(':');
        if (colon != std::string_view::npos && colon + 1 < userinfo.size()) {
            throw cli_error(exit_status::usage,
                            fmt::format("--url {} has a password already: give it once (in the "
                                        "URL, --password-file or $DLOCK_PASSWORD)",
                                        redact_url(url)));
        }
        user = std::string(userinfo.substr(0, colon));
        rest = at + 1;
    }
    std::string encoded;
    for (const char c : password) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
            encoded += c;
        } else {
            encoded += fmt::format("%{:02X}", u);
        }
    }
    return fmt::format("{}{}:{}@{}", url.substr(0, authority_begin), user, encoded,
                       url.substr(rest));
}

service_url parse_service_url(std::string_view url) {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) return {false, {std::string(url)}};
    const auto scheme = url.substr(0, scheme_end);
    if (scheme == "zk") return {.servers = {std::string(url)}, .zk = true};
    const std::pair<std::string_view, std::string_view> planned[] = {{"etcd", "etcd"}};
    for (const auto& [name, what] : planned) {
        if (scheme == name) {
            throw cli_error(exit_status::unavailable,
                            fmt::format("{}:// URLs ({}) are not available in this build yet; use "
                                        "redis://host:port, unix:///path/to.sock, "
                                        "redlock://host:port,host:port,host:port or "
                                        "zk://host:port,host:port,host:port/base",
                                        name, what));
        }
    }
    if (scheme != "redlock") return {false, {std::string(url)}};

    // redlock://[userinfo@]h1:p1,h2:p2,...[/db]: the userinfo and db apply to every server.
    const auto bad = [&](std::string_view why) {
        return cli_error(exit_status::usage,
                         fmt::format("--url \"{}\": {} (expected redlock://host:port,host:port,"
                                     "host:port)",
                                     redact_url(url), why));
    };
    auto rest = url.substr(scheme_end + 3);
    if (rest.find('?') != std::string_view::npos) throw bad("query options are not supported");
    const auto slash = rest.find('/');
    const auto path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
    auto hosts = rest.substr(0, slash);
    std::string_view userinfo;
    if (const auto at = hosts.rfind('@'); at != std::string_view::npos) {
        userinfo = hosts.substr(0, at + 1);  // with its '@'
        hosts = hosts.substr(at + 1);
    }
    service_url out{.redlock = true};
    while (true) {
        const auto comma = hosts.find(',');
        const auto host = hosts.substr(0, comma);
        if (host.empty()) throw bad("empty server in the list");
        auto server = fmt::format("redis://{}{}{}", userinfo, host, path);
        // One server twice would count twice towards the quorum (and the library spins on it).
        if (std::find(out.servers.begin(), out.servers.end(), server) != out.servers.end()) {
            throw bad(fmt::format("server {} is listed twice", host));
        }
        out.servers.push_back(std::move(server));
        if (comma == std::string_view::npos) break;
        hosts = hosts.substr(comma + 1);
    }
    return out;
}

lock_service::lock_service(const std::string& url, const std::string& key_prefix,
                           service_callbacks cb)
    : key_prefix_(key_prefix) {
    auto parsed = parse_service_url(url);
    urls_ = std::move(parsed.servers);
    try {
        if (parsed.zk) {
            zk_.emplace(dlock::zk::client_options{.url = urls_.front(),
                                                  .observer = std::move(cb.observer),
                                                  .error_handler = std::move(cb.error_handler)});
        } else if (parsed.redlock) {
            redlock_.emplace(
                dlock::redlock::client_options{.urls = urls_,
                                               .key_prefix = key_prefix,
                                               .observer = std::move(cb.observer),
                                               .error_handler = std::move(cb.error_handler)});
        } else {
            single_.emplace(
                dlock::redis::client_options{.url = urls_.front(),
                                             .key_prefix = key_prefix,
                                             .observer = std::move(cb.observer),
                                             .error_handler = std::move(cb.error_handler)});
        }
    } catch (const dlock::error& e) {
        throw to_cli_error(e, url);
    }
}

dlock::backend& lock_service::backend() noexcept {
    if (zk_) return *zk_;
    if (redlock_) return *redlock_;
    return *single_;
}

std::size_t lock_service::quorum() const noexcept { return redlock_ ? redlock_->quorum() : 1; }

std::vector<dlock::redis::client*> lock_service::servers() {
    if (zk_) return {};
    if (single_) return {&*single_};
    if (inspectors_.empty()) {
        for (const auto& u : urls_) {
            try {
                inspectors_.push_back(std::make_unique<dlock::redis::client>(
                    dlock::redis::client_options{.url = u, .key_prefix = key_prefix_}));
            } catch (const dlock::error& e) {
                throw to_cli_error(e, u);
            }
        }
    }
    std::vector<dlock::redis::client*> out;
    for (const auto& c : inspectors_) out.push_back(c.get());
    return out;
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
    const std::string detail = as_flags(detail_of(e));
    const std::string where = redact_url(url);
    switch (status) {
        case exit_status::unreachable:
            return {status, fmt::format("cannot reach the lock server at {}: {}", where, detail)};
        case exit_status::auth_failed:
            return {
                status,
                fmt::format(
                    "the lock server at {} refused the credentials: {} "
                    "(give the password with --password-file FILE, $DLOCK_PASSWORD or in the URL: "
                    "redis://user:password@host:port)",
                    where, detail)};
        case exit_status::server_error:
            return {status,
                    fmt::format("the lock server at {} answered unexpectedly: {}", where, detail)};
        default: return {status, detail};
    }
}

}  // namespace dlock::cli
