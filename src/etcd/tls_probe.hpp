// Why a TLS connection to an etcds:// member fails, in words (docs/etcd.md): gRPC 1.51 reports a
// refused handshake only as "failed to connect to all addresses", so after such a failure the
// engine makes one handshake of its own with OpenSSL, with the same CA, client certificate and
// server name, and puts the cause (unknown CA, hostname mismatch, expired certificate, client
// certificate required) into its message. OpenSSL stays inside the .cpp.
#pragma once

#include <dlock/options.hpp>

#include <chrono>
#include <string>

namespace dlock::etcd::detail {

/// The cause that makes a TLS handshake with `host_port` ("host:port", "[v6]:port") fail with
/// `tls`, in one line; empty when the handshake succeeds or the member cannot be reached at all
/// within `timeout` (then the TLS settings are not the problem).
std::string tls_problem(const std::string& host_port, const dlock::tls_options& tls,
                        std::chrono::milliseconds timeout);

}  // namespace dlock::etcd::detail
