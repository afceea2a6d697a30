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

redis_endpoint parse_redis_url(std::string_view written, std::error_code& ec) {
    ec.clear();
    redis_endpoint ep;
    const auto bad = [&](const std::string& why) {
        fail(ec, errc::invalid_argument, "URL \"" + redact_url(written) + "\": " + why);
        return redis_endpoint{};
    };
    // Schemes are case-insensitive (RFC 3986 3.1): "REDIS://" is "redis://".
    const std::string lowered = lower_scheme(written);
    const std::string_view url = lowered;
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) {
        return bad("expected redis://host[:port][/db], rediss://... or unix:///path");
    }
    const auto scheme = url.substr(0, scheme_end);
    auto rest = url.substr(scheme_end + 3);
    if (scheme == "unix") {
        ep.kind = redis_endpoint::transport::unix_socket;
    } else if (scheme == "redis") {
        ep.kind = redis_endpoint::transport::tcp;
    } else if (scheme == "rediss") {
        ep.kind = redis_endpoint::transport::tls;
    } else {
        // Not quoted unless it is a scheme: "user:pass://..." would show the password.
        return bad((is_scheme(scheme) ? "unknown scheme \"" + std::string(scheme) + "\""
                                      : std::string("no scheme")) +
                   " (expected redis, rediss or unix)");
    }

    // The userinfo ends at the LAST '@' of the text (core/url.hpp), for unix:// too: an
    // unencoded '/', '?' or '#' in a password must not turn its tail into a host, port, socket
    // path, database or query that an error message would quote. (A socket path holding an '@'
    // writes it %40.)
    std::string_view userinfo;
    const auto at = rest.rfind('@');
    const bool has_userinfo = at != std::string_view::npos;
    if (has_userinfo) {
        userinfo = rest.substr(0, at);
        rest = rest.substr(at + 1);
    }
    if (userinfo.find_first_of("/?#") != std::string_view::npos) {
        return bad(
            "unencoded '/', '?' or '#' in the user or password (write them as %2F, %3F, %23)");
    }
    if (rest.find('#') != std::string_view::npos) return bad("a fragment (#...) is not allowed");
    const auto question = rest.find('?');
    const auto query =
        question == std::string_view::npos ? std::string_view{} : rest.substr(question + 1);
    rest = rest.substr(0, question);

    if (has_userinfo) {
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

    bool db_in_path = false;
    if (ep.kind == redis_endpoint::transport::unix_socket) {
        if (!percent_decode(rest, ep.path)) return bad("bad percent-escape in the socket path");
        if (ep.path.empty() || ep.path.front() != '/')
            return bad("unix socket path must be absolute");
        for (const char c : ep.path) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                return bad("control character in the socket path");
        }
    } else {
        const auto slash = rest.find('/');
        const auto authority = rest.substr(0, slash);
        const auto db_part =
            slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
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
        for (const char c : ep.host) {
            if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f ||
                std::string_view("/?#@").find(c) != std::string_view::npos)
                return bad("invalid host \"" + printable(ep.host) + "\"");
        }
        if (!port_text.empty()) {
            long long port = 0;
            if (!parse_int(port_text, 1, 65535, port)) {
                return bad("port \"" + printable(port_text) + "\" is not in 1..65535");
            }
            ep.port = static_cast<std::uint16_t>(port);
        }
        if (!db_part.empty()) {
            long long db = 0;
            if (!parse_int(db_part, 0, 1 << 20, db)) {
                return bad("database \"" + printable(db_part) + "\" is not a number in 0..1048576");
            }
            ep.db = static_cast<int>(db);
            db_in_path = true;
        }
    }

    // Query options (the redis-py spelling): ?db=N&user=NAME&password=SECRET. Values are never
    // quoted in a message: any of them could be a credential.
    bool user_given = !ep.user.empty();
    bool db_given = db_in_path;
    for (const auto& item : query_items(query)) {
        const auto item_bad = [&](const std::string& why) {
            return bad(why + " (query options: db=N, user=NAME, password=SECRET" +
                       (ep.kind == redis_endpoint::transport::tls
                            ? ", tls_ca=FILE, tls_ca_dir=DIR, tls_cert=FILE, tls_key=FILE, "
                              "tls_server_name=NAME, tls_insecure=1)"
                            : ")"));
        };
        if (!item.key_decoded || !item.has_value) return item_bad("malformed query item");
        std::string value;
        if (!percent_decode(item.value, value)) {
            return item_bad("bad percent-escape in the value of query option \"" +
                            printable(item.key) + "\"");
        }
        if (iequals(item.key, "db")) {
            long long db = 0;
            if (db_given) return item_bad("the database is given twice");
            if (!parse_int(value, 0, 1 << 20, db)) {
                return item_bad("db=" + printable(value) + " is not a number in 0..1048576");
            }
            ep.db = static_cast<int>(db);
            db_given = true;
        } else if (iequals(item.key, "user") || iequals(item.key, "username")) {
            if (user_given) return item_bad("the user name is given twice");
            ep.user = value;
            user_given = true;
        } else if (item.key.starts_with("tls_") && ep.kind != redis_endpoint::transport::tls) {
            return item_bad("query option \"" + printable(item.key) +
                            "\" applies to rediss:// (TLS) URLs only");
        } else if (const auto problem = tls_query_item(item.key, value, ep.tls)) {
            if (!problem->empty()) return item_bad(*problem);
        } else if (iequals(item.key, "password")) {
            if (!ep.password.empty()) return item_bad("the password is given twice");
            ep.password = value;
            ep.has_password = true;
        } else {
            return item_bad("unknown query option \"" + printable(item.key) + "\"");
        }
    }
    if (ep.kind == redis_endpoint::transport::tls &&
        ep.tls.cert_file.empty() != ep.tls.key_file.empty()) {
        return bad("tls_cert and tls_key go together (a client certificate and its key)");
    }
    return ep;
}

void apply_tls_options(redis_endpoint& ep, const dlock::tls_options& options, std::error_code& ec) {
    ec.clear();
    if (!any_tls(options)) return;
    if (ep.kind != redis_endpoint::transport::tls) {
        fail(ec, errc::invalid_argument,
             "redis " + ep.describe() +
                 ": TLS options (CA, client certificate, server name, insecure) apply to "
                 "rediss:// URLs only");
        return;
    }
    auto& t = ep.tls;
    merge_tls_options(t, options);
    if (t.cert_file.empty() != t.key_file.empty()) {
        fail(ec, errc::invalid_argument,
             "redis " + ep.describe() +
                 ": a TLS client certificate and its key go together (give both or neither)");
    }
}

}  // namespace dlock::detail
