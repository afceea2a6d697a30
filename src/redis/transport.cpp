#include "redis/transport.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/status.hpp"

namespace dlock::redis::detail {
namespace {

using dlock::detail::fail;
using dlock::detail::redis_endpoint;

/// poll() one descriptor until `deadline`. 1 ready, 0 timed out, -1 error (errno set).
int wait_for(int fd, short events, steady::time_point deadline) {
    for (;;) {
        const auto now = steady::now();
        int timeout_ms = 0;
        if (deadline == steady::time_point::max()) {
            timeout_ms = -1;
        } else if (deadline > now) {
            // Round up so we never wake just before the deadline and spin.
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
            timeout_ms = left > 60'000 ? 60'000 : static_cast<int>(left);
        }
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n > 0) return 1;
        if (steady::now() >= deadline) return 0;
    }
}

class socket_transport final : public transport {
public:
    explicit socket_transport(redis_endpoint endpoint) : endpoint_(std::move(endpoint)) {}
    ~socket_transport() override { close(); }

    void connect(steady::time_point deadline, std::error_code& ec) override {
        close();
        if (endpoint_.kind == redis_endpoint::transport::unix_socket) {
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            if (endpoint_.path.size() >= sizeof addr.sun_path) {
                return fail(ec, errc::invalid_argument, "unix socket path too long: " + endpoint_.path);
            }
            std::memcpy(addr.sun_path, endpoint_.path.c_str(), endpoint_.path.size() + 1);
            try_connect(AF_UNIX, reinterpret_cast<sockaddr*>(&addr), sizeof addr, deadline, ec);
            return;
        }
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        const auto port = std::to_string(endpoint_.port);
        const int rc = ::getaddrinfo(endpoint_.host.c_str(), port.c_str(), &hints, &found);
        if (rc != 0) {
            return fail(ec, errc::connection_failed,
                        "redis " + endpoint_.describe() + ": cannot resolve host: " + ::gai_strerror(rc));
        }
        for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
            ec.clear();
            try_connect(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline, ec);
            if (!ec || ec == errc::server_timeout) break;
        }
        ::freeaddrinfo(found);
    }

    void write_all(std::string_view bytes, steady::time_point deadline, std::error_code& ec) override {
        while (!bytes.empty()) {
            const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n > 0) {
                bytes.remove_prefix(static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                const int w = wait_for(fd_, POLLOUT, deadline);
                if (w == 0) return fail(ec, errc::server_timeout, "redis " + endpoint_.describe() + ": write timed out");
                if (w > 0) continue;
            }
            return fail(ec, errc::connection_failed,
                        "redis " + endpoint_.describe() + ": write failed: " + std::strerror(errno));
        }
    }

    std::size_t read_some(char* buffer, std::size_t size, steady::time_point deadline, std::error_code& ec) override {
        for (;;) {
            const ssize_t n = ::recv(fd_, buffer, size, 0);
            if (n > 0) return static_cast<std::size_t>(n);
            if (n == 0) {
                fail(ec, errc::connection_failed, "redis " + endpoint_.describe() + ": connection closed by the server");
                return 0;
            }
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                const int w = wait_for(fd_, POLLIN, deadline);
                if (w == 0) {
                    fail(ec, errc::server_timeout, "redis " + endpoint_.describe() + ": no reply in time");
                    return 0;
                }
                if (w > 0) continue;
            }
            fail(ec, errc::connection_failed, "redis " + endpoint_.describe() + ": read failed: " + std::strerror(errno));
            return 0;
        }
    }

    bool idle_stream_broken() const noexcept override {
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) != 0;  // readable, hung up, error: none is right for an idle stream
    }

    int native_handle() const noexcept override { return fd_; }

    void close() noexcept override {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    void try_connect(int family, const sockaddr* addr, socklen_t len, steady::time_point deadline,
                     std::error_code& ec) {
        fd_ = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd_ < 0) {
            return fail(ec, errc::connection_failed, std::string("socket: ") + std::strerror(errno));
        }
        if (family != AF_UNIX) {
            const int one = 1;
            // Lock commands are tiny request/response pairs: Nagle would add up to 40 ms each.
            ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        }
        if (::connect(fd_, addr, len) == 0) return;
        if (errno != EINPROGRESS && errno != EAGAIN) return connect_failed(errno, ec);
        const int w = wait_for(fd_, POLLOUT, deadline);
        if (w == 0) {
            close();
            return fail(ec, errc::server_timeout, "redis " + endpoint_.describe() + ": connect timed out");
        }
        int err = 0;
        socklen_t err_len = sizeof err;
        if (w < 0) err = errno;
        else ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &err_len);
        if (err != 0) connect_failed(err, ec);
    }

    void connect_failed(int err, std::error_code& ec) {
        close();
        fail(ec, errc::connection_failed, "redis " + endpoint_.describe() + ": connect failed: " + std::strerror(err));
    }

    redis_endpoint endpoint_;
    int fd_ = -1;
};

}  // namespace

std::unique_ptr<transport> make_transport(const redis_endpoint& endpoint, std::error_code& ec) {
    if (endpoint.kind == redis_endpoint::transport::tls) {
        fail(ec, errc::unsupported,
             "rediss:// needs TLS, which this build lacks (Debian's hiredis 0.14 has none); "
             "use redis:// over a trusted network or a TLS tunnel");
        return nullptr;
    }
    return std::make_unique<socket_transport>(endpoint);
}

}  // namespace dlock::redis::detail
