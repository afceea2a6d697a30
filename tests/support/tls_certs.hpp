// Certificates for TLS tests, made with the openssl CLI in a temp dir when constructed (EC keys,
// well under a second) and removed with it: a CA, a server certificate for localhost and
// 127.0.0.1, one for localhost only, an expired one, one from a CA nobody trusts, and a client
// certificate for mutual TLS. Each leaf is "<dir>/<name>.pem" with its key "<dir>/<name>.key".
#pragma once

#include <string>

namespace dlock::test {

class tls_certs {
public:
    /// Throws std::runtime_error (with openssl's output) if a certificate cannot be made.
    tls_certs();
    ~tls_certs();
    tls_certs(const tls_certs&) = delete;
    tls_certs& operator=(const tls_certs&) = delete;

    const std::string& dir() const { return dir_; }
    /// The CA that signed server, localhost, expired and client.
    std::string ca() const { return dir_ + "/ca.pem"; }
    /// "<dir>/<name>.pem" for name in server (DNS:localhost, IP:127.0.0.1), localhost
    /// (DNS:localhost only), expired (like server, expired in 2020), stranger (like server, from
    /// another CA), client (a client certificate).
    std::string cert(const std::string& name) const { return dir_ + "/" + name + ".pem"; }
    std::string key(const std::string& name) const { return dir_ + "/" + name + ".key"; }

private:
    std::string dir_;
};

class redis_server;

/// One set of certificates per test binary, made at first use.
tls_certs& shared_tls_certs();
/// One redis-server per test binary serving TLS with shared_tls_certs() (tls_url(), clients
/// verified against its ca()), started at first use.
redis_server& shared_tls_redis();

}  // namespace dlock::test
