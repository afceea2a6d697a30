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

}  // namespace

std::string default_url() {
    std::string url = env_value("DLOCK_URL");
    return url.empty() ? "redis://127.0.0.1:6379" : url;
}

std::optional<std::pair<std::size_t, std::size_t>> password_span(std::string_view url) {
    return dlock::url_password(url);
}

bool has_password(std::string_view url) { return password_span(url).has_value(); }

std::string with_password(std::string_view url, std::string_view password) {
    const auto scheme = dlock::url_scheme(url);
    if (scheme != "redis" && scheme != "redlock") {
        throw cli_error(exit_status::usage,
                        fmt::format("--password-file and $DLOCK_PASSWORD apply to redis:// and "
                                    "redlock:// URLs only, not to {}",
                                    redact_url(url)));
    }
    if (has_password(url)) {
        throw cli_error(exit_status::usage,
                        fmt::format("--url {} has a password already: give it once (in the "
                                    "URL, --password-file or $DLOCK_PASSWORD; a user name without "
                                    "a password is written user:@host)",
                                    redact_url(url)));
    }
    try {
        return dlock::url_with_password(url, password);
    } catch (const dlock::error& e) {
        throw to_cli_error(e, url);
    }
}

service_url parse_service_url(std::string_view url) {
    try {
        auto parsed = dlock::parse_service_url(url);
        return {.redlock = parsed.kind == dlock::service_kind::redlock,
                .servers = std::move(parsed.servers),
                .zk = parsed.kind == dlock::service_kind::zookeeper};
    } catch (const dlock::error& e) {
        throw to_cli_error(e, url);
    }
}

lock_service::lock_service(const std::string& url, const std::string& key_prefix,
                           service_callbacks cb)
    : lock_service(server_options{.url = url, .key_prefix = key_prefix}, std::move(cb)) {}

lock_service::lock_service(const server_options& server, service_callbacks cb)
    : key_prefix_(server.key_prefix),
      connect_timeout_(server.connect_timeout),
      command_timeout_(server.command_timeout) {
    const std::string& url = server.url;
    const std::string& key_prefix = server.key_prefix;
    try {
        auto parsed = dlock::parse_service_url(url);
        kind_ = parsed.kind;
        urls_ = std::move(parsed.servers);
        dlock::connect_options options{.connect_timeout = server.connect_timeout,
                                       .observer = std::move(cb.observer),
                                       .error_handler = std::move(cb.error_handler),
                                       .command_timeout = server.command_timeout};
        // A zk:// URL names its base path itself; --key-prefix is for the Redis family.
        if (kind_ != dlock::service_kind::zookeeper) options.key_prefix = key_prefix;
        backend_ = dlock::connect(url, std::move(options));
    } catch (const dlock::error& e) {
        throw to_cli_error(e, url);
    }
}

std::size_t lock_service::quorum() const noexcept {
    if (const auto* redlock = dynamic_cast<const dlock::redlock::client*>(backend_.get()))
        return redlock->quorum();
    return 1;
}

std::vector<dlock::redis::client*> lock_service::servers() {
    if (kind_ == dlock::service_kind::zookeeper) return {};
    if (auto* single = dynamic_cast<dlock::redis::client*>(backend_.get())) return {single};
    if (inspectors_.empty()) {
        for (const auto& u : urls_) {
            try {
                dlock::redis::client_options o{.url = u, .key_prefix = key_prefix_};
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
