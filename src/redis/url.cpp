#include "redis/url.hpp"

#include <charconv>

#include "core/status.hpp"

namespace dlock::detail {
namespace {

bool parse_int(std::string_view text, long long low, long long high, long long& out) {
    if (text.empty()) return false;
    const auto* end = text.data() + text.size();
    const auto [ptr, err] = std::from_chars(text.data(), end, out);
    return err == std::errc{} && ptr == end && out >= low && out <= high;
}

}  // namespace

std::string redis_endpoint::describe() const {
    if (kind == transport::unix_socket) return path;
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

redis_endpoint parse_redis_url(std::string_view url, std::error_code& ec) {
    ec.clear();
    redis_endpoint ep;
    const auto bad = [&](const std::string& why) {
        fail(ec, errc::invalid_argument, "URL \"" + redact_url(url) + "\": " + why);
        return redis_endpoint{};
    };
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) {
        return bad("expected redis://host[:port][/db], rediss://... or unix:///path");
    }
    const auto scheme = url.substr(0, scheme_end);
    auto rest = url.substr(scheme_end + 3);

    if (scheme == "unix") {
        ep.kind = redis_endpoint::transport::unix_socket;
        const auto query = rest.find('?');
        ep.path = std::string(rest.substr(0, query));
        if (ep.path.empty() || ep.path.front() != '/')
            return bad("unix socket path must be absolute");
        if (query != std::string_view::npos) {
            const auto q = rest.substr(query + 1);
            long long db = 0;
            if (q.substr(0, 3) != "db=" || !parse_int(q.substr(3), 0, 1 << 20, db)) {
                return bad("the only query option is db=N");
            }
            ep.db = static_cast<int>(db);
        }
        return ep;
    }
    if (scheme == "redis") {
        ep.kind = redis_endpoint::transport::tcp;
    } else if (scheme == "rediss") {
        ep.kind = redis_endpoint::transport::tls;
    } else {
        // Not quoted unless it is a scheme: "user:pass://..." would show the password.
        return bad((is_scheme(scheme) ? "unknown scheme \"" + std::string(scheme) + "\""
                                      : std::string("no scheme")) +
                   " (expected redis, rediss or unix)");
    }

    // The userinfo ends at the LAST '@' of the text (this URL has no query, and its path is a
    // number): an unencoded '/', '?' or '#' in a password must not turn its tail into a host,
    // port or database that an error message would quote.
    const auto at = rest.rfind('@');
    const auto userinfo = at == std::string_view::npos ? std::string_view{} : rest.substr(0, at);
    if (at != std::string_view::npos) rest = rest.substr(at + 1);
    if (userinfo.find_first_of("/?#") != std::string_view::npos) {
        return bad(
            "unencoded '/', '?' or '#' in the user or password (write them as %2F, %3F, %23)");
    }
    const auto slash = rest.find('/');
    auto authority = rest.substr(0, slash);
    const auto db_part =
        slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);

    if (at != std::string_view::npos) {
        const auto colon = userinfo.find(':');
        std::string decoded;
        if (!percent_decode(userinfo.substr(0, colon), decoded))
            return bad("bad percent-escape in the user or password");
        ep.user = decoded;
        if (colon != std::string_view::npos) {
            if (!percent_decode(userinfo.substr(colon + 1), decoded)) {
                return bad("bad percent-escape in password");
            }
            ep.password = decoded;
            ep.has_password = true;
        } else if (!ep.user.empty()) {
            // redis://secret@host is the common "password only" spelling.
            ep.password = ep.user;
            ep.user.clear();
            ep.has_password = true;
        }
    }

    std::string_view port_text;
    if (!authority.empty() && authority.front() == '[') {
        const auto close = authority.find(']');
        if (close == std::string_view::npos) return bad("unclosed '[' in IPv6 host");
        ep.host = std::string(authority.substr(1, close - 1));
        const auto after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') return bad("expected ':' after ']'");
            port_text = after.substr(1);
            if (port_text.empty()) return bad("empty port");
        }
    } else {
        const auto colon = authority.rfind(':');
        ep.host = std::string(authority.substr(0, colon));
        if (colon != std::string_view::npos) {
            port_text = authority.substr(colon + 1);
            if (port_text.empty()) return bad("empty port");
        }
    }
    if (ep.host.empty()) return bad("missing host");
    if (ep.host.find_first_of(" /?#@") != std::string::npos)
        return bad("invalid host \"" + ep.host + "\"");
    if (!port_text.empty()) {
        long long port = 0;
        if (!parse_int(port_text, 1, 65535, port)) {
            return bad("port \"" + std::string(port_text) + "\" is not in 1..65535");
        }
        ep.port = static_cast<std::uint16_t>(port);
    }
    if (!db_part.empty()) {
        long long db = 0;
        if (!parse_int(db_part, 0, 1 << 20, db)) {
            return bad("database \"" + std::string(db_part) + "\" is not a non-negative number");
        }
        ep.db = static_cast<int>(db);
    }
    return ep;
}

}  // namespace dlock::detail
