// rediss://: TLS over OpenSSL 3 inside dlock's own non-blocking transport (docs/tls.md). The
// server's certificate is verified by default (the system trust store or the given CA, and the
// host name: SSL_set1_host, or the IP address), SNI is sent for DNS names only, TLS 1.2 at least.
// The socket is written with send(MSG_NOSIGNAL) through a BIO of our own, so a server that drops
// the connection (a TLS 1.3 server refusing our client certificate after the handshake) is an
// error, never SIGPIPE. OpenSSL stays inside this file's .cpp.
#pragma once

#include <memory>
#include <system_error>

#include "redis/transport.hpp"

namespace dlock::redis::detail {

/// A TLS transport for `endpoint` (kind tls). The OpenSSL context (trust store, client
/// certificate) is shared by every transport with the same files; loading them fails with
/// errc::invalid_argument naming the file and OpenSSL's reason.
std::unique_ptr<transport> make_tls_transport(const dlock::detail::redis_endpoint& endpoint,
                                              std::error_code& ec);

}  // namespace dlock::redis::detail
