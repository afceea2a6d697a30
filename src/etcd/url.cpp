#include "etcd/url.hpp"

#include <dlock/error.hpp>

#include <cstdio>

#include "core/status.hpp"
#include "core/url.hpp"

namespace dlock::etcd::detail {

using dlock::detail::fail;

namespace {

constexpr std::string_view scheme = "etcd://";

}  // namespace

etcd_endpoint parse_etcd_url(std::string_view written, std::error_code& ec) {
    ec.clear();
    const auto bad = [&](const std::string& why) {
        fail(ec, errc::invalid_argument,
             "URL \"" + dlock::detail::redact_url(written) + "\": " + why);
        return etcd_endpoint{};
    };
    const std::string lowered = dlock::detail::lower_scheme(written);
    const std::string_view url = lowered;
    if (!url.starts_with(scheme)) return bad("must start with etcd://");
    const auto rest = url.substr(scheme.size());
    if (rest.find_first_of("?#@") != std::string_view::npos)
        return bad("query strings, fragments and credentials are not supported");
    const auto slash = rest.find('/');
    const auto authority = rest.substr(0, slash);
    if (authority.empty()) return bad("no host given");
    etcd_endpoint out;
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
    if (slash == std::string_view::npos) return out;
    std::string decoded;
    if (!dlock::detail::percent_decode(rest.substr(slash + 1), decoded))
        return bad("bad percent-encoding in the key prefix");
    for (const char c : decoded) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            return bad("control character in the key prefix");
    }
    if (!decoded.empty() && !decoded.ends_with('/')) decoded += '/';
    out.prefix = std::move(decoded);
    return out;
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
