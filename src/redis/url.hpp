// Redis endpoint URLs, parsed without I/O (the scheme-neutral pieces, user-info and redaction,
// are in src/core/url.hpp):
//   redis://[user[:password]@]host[:port][/db][?query]   rediss://... (TLS, docs/tls.md)
//   unix://[user[:password]@]/path/to/socket[?query]      (the path percent-decoded: '@' is %40)
// The query takes db=N, user=NAME (or username=) and password=SECRET (redis-py's spelling); any
// rediss:// also takes tls_ca=FILE, tls_ca_dir=DIR, tls_cert=FILE, tls_key=FILE,
// tls_server_name=NAME and tls_insecure=1 (0/1/true/false). Any
// other key, an item without '=', a fragment or a second password is refused. Schemes are
// case-insensitive.
// IPv6 hosts go in brackets: redis://[::1]:6380. Percent-escapes are decoded in user/password.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/options.hpp>

#include "core/url.hpp"

namespace dlock::detail {

struct redis_endpoint {
    enum class transport { tcp, tls, unix_socket };
    transport kind = transport::tcp;
    std::string host;  ///< tcp/tls
    std::uint16_t port = 6379;
    std::string path;      ///< unix_socket
    std::string user;      ///< empty: AUTH with password only (the "default" user)
    std::string password;  ///< empty: no AUTH
    bool has_password = false;
    int db = 0;
    dlock::tls_options tls{};  ///< tls only

    /// host:port or the socket path, for messages (never includes the password).
    std::string describe() const;
};

/// Parses `url`; on failure sets ec to errc::invalid_argument with a message naming the problem.
redis_endpoint parse_redis_url(std::string_view url, std::error_code& ec);

/// Fills the TLS settings `ep`'s URL left unset from `options` (a client's tls_options: the URL's
/// query wins). errc::invalid_argument when `options` sets anything for an endpoint that is not
/// TLS, or names a client certificate without its key (or a key without its certificate).
void apply_tls_options(redis_endpoint& ep, const dlock::tls_options& options, std::error_code& ec);

}  // namespace dlock::detail
