// Redis endpoint URLs, parsed without I/O (the scheme-neutral pieces, user-info and redaction,
// are in src/core/url.hpp):
//   redis://[user[:password]@]host[:port][/db][?query]   rediss://... (TLS; parsed, refused later)
//   unix://[user[:password]@]/path/to/socket[?query]      (the path percent-decoded: '@' is %40)
// The query takes db=N, user=NAME (or username=) and password=SECRET (redis-py's spelling); any
// other key, an item without '=', a fragment or a second password is refused. Schemes are
// case-insensitive.
// IPv6 hosts go in brackets: redis://[::1]:6380. Percent-escapes are decoded in user/password.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

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

    /// host:port or the socket path, for messages (never includes the password).
    std::string describe() const;
};

/// Parses `url`; on failure sets ec to errc::invalid_argument with a message naming the problem.
redis_endpoint parse_redis_url(std::string_view url, std::error_code& ec);

}  // namespace dlock::detail
