#include "etcd/tls_probe.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <memory>

#include "core/tls_verify.hpp"

namespace dlock::etcd::detail {

namespace {

struct fd_closer {
    int fd = -1;
    fd_closer(const fd_closer&) = delete;
    fd_closer& operator=(const fd_closer&) = delete;
    explicit fd_closer(int f) : fd(f) {}
    ~fd_closer() {
        if (fd >= 0) ::close(fd);
    }
};

bool is_ip(const std::string& host) {
    std::array<unsigned char, 16> buffer{};
    return ::inet_pton(AF_INET, host.c_str(), buffer.data()) == 1 ||
           ::inet_pton(AF_INET6, host.c_str(), buffer.data()) == 1;
}

/// A connected socket to host:port within `timeout`, blocking with `timeout` on each read and
/// write; -1 when it cannot be reached.
int connect_to(const std::string& host, const std::string& port,
               std::chrono::milliseconds timeout) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr)
        return -1;
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    fd_closer guard(fd);
    if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) return -1;
        pollfd p{fd, POLLOUT, 0};
        int err = 0;
        socklen_t len = sizeof err;
        if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1 ||
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
            return -1;
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) return -1;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    guard.fd = -1;
    return fd;
}

std::string ssl_reason(bool have_cert) {
    const unsigned long e = ERR_peek_last_error();
    if (e == 0) return "connection closed by the server";
    const int reason = ERR_GET_LIB(e) == ERR_LIB_SSL ? ERR_GET_REASON(e) : 0;
    if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
        (reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE && !have_cert)) {
        return "the server requires a client certificate (give one with tls_cert and tls_key / "
               "--tls-cert and --tls-key)";
    }
    if (reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE || reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA)
        return "the server refused our client certificate (tls alert bad certificate)";
    std::array<char, 256> text{};
    ERR_error_string_n(e, text.data(), text.size());
    return text.data();
}

}  // namespace

std::string tls_problem(const std::string& host_port, const dlock::tls_options& tls,
                        std::chrono::milliseconds timeout) {
    const auto colon = host_port.rfind(':');
    if (colon == std::string::npos) return {};
    std::string host = host_port.substr(0, colon);
    if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const auto port = host_port.substr(colon + 1);
    const std::string name = tls.server_name.empty() ? host : tls.server_name;

    const std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                                SSL_CTX_free);
    if (!ctx) return {};
    SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx.get(), tls.insecure_skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                       nullptr);
    const bool loaded = tls.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx.get()) == 1
                                            : SSL_CTX_load_verify_locations(
                                                  ctx.get(), tls.ca_file.c_str(), nullptr) == 1;
    if (!loaded) return "the CA file \"" + tls.ca_file + "\" cannot be loaded";
    if (!tls.cert_file.empty() &&
        (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert_file.c_str()) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1))
        return "the client certificate or key cannot be loaded";
    static constexpr unsigned char alpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(ctx.get(), alpn, sizeof alpn);

    const int fd = connect_to(host, port, timeout);
    if (fd < 0) return {};
    fd_closer guard(fd);
    const std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
    if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return {};
    if (!tls.insecure_skip_verify) {
        if (is_ip(name)) {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), name.c_str());
        } else {
            SSL_set1_host(ssl.get(), name.c_str());
        }
    }
    if (!is_ip(name)) SSL_set_tlsext_host_name(ssl.get(), name.c_str());
    ERR_clear_error();
    if (SSL_connect(ssl.get()) != 1) {
        const long verified = SSL_get_verify_result(ssl.get());
        if (verified != X509_V_OK)
            return dlock::detail::tls_verify_problem(verified, name, !tls.ca_file.empty());
        return ssl_reason(!tls.cert_file.empty());
    }
    // TLS 1.3: a server that wants a client certificate refuses it after the handshake, so read
    // what it sends first (an HTTP/2 server sends its SETTINGS at once).
    std::array<char, 64> buffer{};
    ERR_clear_error();
    if (SSL_read(ssl.get(), buffer.data(), static_cast<int>(buffer.size())) > 0) return {};
    const int error = SSL_get_error(ssl.get(), -1);
    if (error == SSL_ERROR_SYSCALL && ERR_peek_last_error() == 0) return {};  // timeout: no cause
    return ssl_reason(!tls.cert_file.empty());
}

}  // namespace dlock::etcd::detail
