#include "etcd/url.hpp"

#include <dlock/error.hpp>

#include <cstdio>

#include "core/status.hpp"
#include "core/url.hpp"

namespace dlock::etcd::detail {

using dlock::detail::fail;

namespace {

constexpr std::string_view plain_scheme = "etcd://";
constexpr std::string_view tls_scheme = "etcds://";
constexpr std::string_view query_forms =
    " (etcds:// query options: tls_ca=FILE, tls_cert=FILE, tls_key=FILE, tls_server_name=NAME, "
    "tls_insecure=1)";

}  // namespace

etcd_endpoint parse_etcd_url(std::string_view written, std::error_code& ec) {
    ec.clear();
    using dlock::detail::iequals;
    using dlock::detail::printable;
    const auto bad = [&](const std::string& why) {
        fail(ec, errc::invalid_argument,
             "URL \"" + dlock::detail::redact_url(written) + "\": " + why);
        return etcd_endpoint{};
    };
    const std::string lowered = dlock::detail::lower_scheme(written);
    const std::string_view url = lowered;
    etcd_endpoint out;
    std::string_view rest;
    if (url.starts_with(plain_scheme)) {
        rest = url.substr(plain_scheme.size());
    } else if (url.starts_with(tls_scheme)) {
        rest = url.substr(tls_scheme.size());
        out.secure = true;
    } else {
        return bad("must start with etcd:// or etcds://");
    }
    // user:password@ (the user-info ends at the last '@', core/url.hpp). Never quoted: only the
    // redacted URL is.
    if (const auto span = dlock::detail::find_userinfo(url)) {
        const auto user = span->user(url);
        if (span->colon == std::string_view::npos || user.empty()) {
            return bad(
                "etcd credentials are user:password@ (a user name is required; with the "
                "password elsewhere write user:@)");
        }
        const auto info = url.substr(span->begin, span->end + 1 - span->begin);
        if (info.find_first_of("/?#") != std::string_view::npos)
            return bad(
                "unencoded '/', '?' or '#' in the user or password (write them as %2F, "
                "%3F, %23)");
        if (!dlock::detail::percent_decode(user, out.user) ||
            !dlock::detail::percent_decode(
                url.substr(span->password_begin(), span->password_length()), out.password)) {
            return bad("bad percent-encoding in the user or password");
        }
        if (out.password.empty())
            return bad("empty password for user \"" + printable(out.user) + "\"");
        rest = url.substr(span->end + 1);
    }
    if (rest.find('#') != std::string_view::npos) return bad("a fragment (#...) is not allowed");
    const auto question = rest.find('?');
    const auto query =
        question == std::string_view::npos ? std::string_view{} : rest.substr(question + 1);
    rest = rest.substr(0, question);
    const auto slash = rest.find('/');
    const auto authority = rest.substr(0, slash);
    if (authority.empty()) return bad("no host given");
    std::size_t start = 0;
    for (;;) {
        const auto comma = authority.find(',', start);
        std::string host, why;
        if (!dlock::detail::parse_host_port(authority.substr(start, comma - start), "2379", host,
                                            why)) {
            return bad(why);
        }
        out.hosts.push_back(std::move(host));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    if (slash != std::string_view::npos) {
        std::string decoded;
        if (!dlock::detail::percent_decode(rest.substr(slash + 1), decoded))
            return bad("bad percent-encoding in the key prefix");
        for (const char c : decoded) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                return bad("control character in the key prefix");
        }
        if (!decoded.empty() && !decoded.ends_with('/')) decoded += '/';
        out.prefix = std::move(decoded);
    }
    // The query options of rediss:// that apply to gRPC's TLS (docs/etcd.md). Values other than
    // these are never quoted: any of them could be a credential.
    for (const auto& item : dlock::detail::query_items(query)) {
        const auto item_bad = [&](const std::string& why) {
            return bad(why + std::string(out.secure ? query_forms : ""));
        };
        if (!item.key_decoded || !item.has_value) return item_bad("malformed query item");
        std::string value;
        if (!dlock::detail::percent_decode(item.value, value)) {
            return item_bad("bad percent-escape in the value of query option \"" +
                            printable(item.key) + "\"");
        }
        if (!out.secure) {
            return bad(item.key.starts_with("tls_")
                           ? "query option \"" + printable(item.key) +
                                 "\" applies to etcds:// (TLS) URLs only"
                           : "query strings are not supported on etcd:// URLs");
        }
        const auto problem = dlock::detail::tls_query_item(item.key, value, out.tls);
        if (!problem) return item_bad("unknown query option \"" + printable(item.key) + "\"");
        if (!problem->empty()) return item_bad(*problem);
        if (!out.tls.ca_dir.empty()) {
            return item_bad(
                "tls_ca_dir is not supported on etcds:// (gRPC takes one CA file): "
                "use tls_ca=FILE");
        }
    }
    if (out.tls.cert_file.empty() != out.tls.key_file.empty())
        return bad("tls_cert and tls_key go together (a client certificate and its key)");
    return out;
}

void apply_tls_options(etcd_endpoint& endpoint, const dlock::tls_options& options,
                       std::error_code& ec) {
    ec.clear();
    if (!dlock::detail::any_tls(options)) return;
    if (!endpoint.secure) {
        fail(ec, errc::invalid_argument,
             "etcd: TLS options (CA, client certificate, server name, insecure) apply to "
             "etcds:// URLs only");
        return;
    }
    if (!options.ca_dir.empty()) {
        fail(ec, errc::invalid_argument,
             "etcd: tls_options.ca_dir is not supported on etcds:// (gRPC takes one CA file): "
             "set ca_file");
        return;
    }
    auto& t = endpoint.tls;
    dlock::detail::merge_tls_options(t, options);
    if (t.cert_file.empty() != t.key_file.empty()) {
        fail(ec, errc::invalid_argument,
             "etcd: tls_options.cert_file and key_file go together (a client certificate and its "
             "key)");
    }
}

std::string key_prefix(const etcd_endpoint& endpoint, std::string_view name) {
    return endpoint.prefix + std::string(name) + "/";
}

std::string queue_key(std::string_view key_prefix, std::int64_t lease_id) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%llx",
                  static_cast<unsigned long long>(static_cast<std::uint64_t>(lease_id)));
    return std::string(key_prefix) + hex;
}

std::string prefix_range_end(std::string_view prefix) {
    std::string end(prefix);
    while (!end.empty()) {
        if (static_cast<unsigned char>(end.back()) < 0xff) {
            end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
            return end;
        }
        end.pop_back();
    }
    return std::string(1, '\0');
}

}  // namespace dlock::etcd::detail
