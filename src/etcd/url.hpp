// etcd URLs (docs/etcd.md): `etcd://[user:password@]host1:port1,host2:port2,.../prefix`, and
// `etcds://...` (TLS, with the tls_* query options of rediss://). Free of I/O.
#pragma once

#include <dlock/options.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace dlock::etcd::detail {

struct etcd_endpoint {
    std::vector<std::string> hosts;  ///< "host:port" each, the default port 2379 added
    /// Prepended to every lock name: the URL's path without its leading '/', plus '/' when not
    /// empty ("etcd://h/a/b" -> "a/b/"); empty without a path, so lock N's keys are "N/<lease>"
    /// exactly as `etcdctl lock N` writes them.
    std::string prefix;
    /// etcd's user and password ("etcd://user:password@h1,h2"): the client authenticates as
    /// that user (Authenticate) and sends the token with every request. Empty user: no auth.
    std::string user{};
    std::string password{};
    bool secure = false;  ///< etcds://: TLS to every member
    /// etcds://'s TLS settings (the URL's tls_* query options, then client_options::tls).
    dlock::tls_options tls{};
};

/// Parses an etcd:// URL; errc::invalid_argument naming what is wrong (the URL quoted with any
/// secret hidden).
etcd_endpoint parse_etcd_url(std::string_view url, std::error_code& ec);

/// Fills the TLS settings `endpoint`'s URL left unset from `options` (the URL's own take
/// precedence, as on rediss://); errc::invalid_argument when any is set for an etcd:// URL, for
/// a CA directory (gRPC takes a CA file) or for a certificate without its key.
void apply_tls_options(etcd_endpoint& endpoint, const dlock::tls_options& options,
                       std::error_code& ec);

/// The prefix of lock `name`'s keys: "<prefix><name>/" (concurrency.NewMutex(s, pfx) adds the
/// '/' the same way).
std::string key_prefix(const etcd_endpoint& endpoint, std::string_view name);

/// The key one lease puts to queue for a lock: "<key prefix><lease id in lower-case hex>", as
/// the Go client's fmt.Sprintf("%s%x", pfx, leaseID).
std::string queue_key(std::string_view key_prefix, std::int64_t lease_id);

/// The end of the range of every key starting with `prefix` (etcd's WithPrefix: the prefix with
/// its last byte below 0xff incremented and the rest dropped; "\0" for all keys).
std::string prefix_range_end(std::string_view prefix);

}  // namespace dlock::etcd::detail
