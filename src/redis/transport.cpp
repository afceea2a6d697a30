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
#include <system_error>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "redis/tls_transport.hpp"

namespace dlock::redis::detail {
namespace {

using dlock::detail::fail;
using dlock::detail::redis_endpoint;

struct address {
    int family;
    sockaddr_storage storage;
    socklen_t length;
};

class socket_transport final : public transport {
public:
    explicit socket_transport(redis_endpoint endpoint) : endpoint_(std::move(endpoint)) {}
    ~socket_transport() override { close(); }

    bool start_connect(std::error_code& ec) override {
        close();
        if (!resolve(ec)) return false;
        next_address_ = 0;
        return connect_next(ec);
    }

    bool finish_connect(std::error_code& ec) override {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err == 0) return true;
        last_error_ = err;
        return connect_next(ec);
    }

    bool handshake(std::error_code& /*ec*/) override { return true; }

    short wanted_events(stream_op op) const noexcept override {
        return op == stream_op::read ? POLLIN : POLLOUT;
    }

    bool buffered() const noexcept override { return false; }

    std::size_t write_some(std::string_view bytes, std::error_code& ec) override {
        for (;;) {
            const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n >= 0) return static_cast<std::size_t>(n);
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            fail(ec, errc::connection_failed,
                 "redis " + endpoint_.describe() +
                     ": write failed: " + std::system_category().message(errno));
            return 0;
        }
    }

    std::size_t read_some(char* buffer, std::size_t size, std::error_code& ec) override {
        for (;;) {
            const ssize_t n = ::recv(fd_, buffer, size, 0);
            if (n > 0) return static_cast<std::size_t>(n);
            if (n == 0) {
                fail(ec, errc::connection_failed,
                     "redis " + endpoint_.describe() + ": connection closed by the server");
                return 0;
            }
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            fail(ec, errc::connection_failed,
                 "redis " + endpoint_.describe() +
                     ": read failed: " + std::system_category().message(errno));
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
    bool resolve(std::error_code& ec) {
        if (!addresses_.empty()) return true;  // resolved once: reconnects do not hit DNS again
        if (endpoint_.kind == redis_endpoint::transport::unix_socket) {
            address a{AF_UNIX, {}, sizeof(sockaddr_un)};
            auto* un = reinterpret_cast<sockaddr_un*>(&a.storage);
            un->sun_family = AF_UNIX;
            if (endpoint_.path.size() >= sizeof un->sun_path) {
                fail(ec, errc::invalid_argument, "unix socket path too long: " + endpoint_.path);
                return false;
            }
            std::memcpy(un->sun_path, endpoint_.path.c_str(), endpoint_.path.size() + 1);
            addresses_.push_back(a);
            return true;
        }
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        const auto port = std::to_string(endpoint_.port);
        const int rc = ::getaddrinfo(endpoint_.host.c_str(), port.c_str(), &hints, &found);
        if (rc != 0) {
            fail(ec, errc::connection_failed,
                 "redis " + endpoint_.describe() + ": cannot resolve host: " + ::gai_strerror(rc));
            return false;
        }
        for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
            address a{ai->ai_family, {}, ai->ai_addrlen};
            std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
            addresses_.push_back(a);
        }
        ::freeaddrinfo(found);
        return true;
    }

    /// Tries the remaining addresses in order until one connects or is in progress.
    bool connect_next(std::error_code& ec) {
        close();
        while (next_address_ < addresses_.size()) {
            const auto& a = addresses_[next_address_++];
            fd_ = ::socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd_ < 0) {
                last_error_ = errno;
                continue;
            }
            if (a.family != AF_UNIX) {
                const int one = 1;
                // Lock commands are tiny request/response pairs: Nagle would add up to 40 ms each.
                ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
            }
            if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a.storage), a.length) == 0)
                return true;
            if (errno == EINPROGRESS || errno == EAGAIN) return false;
            last_error_ = errno;
            close();
        }
        fail(ec, errc::connection_failed,
             "redis " + endpoint_.describe() +
                 ": connect failed: " + std::system_category().message(last_error_));
        return false;
    }

    redis_endpoint endpoint_;
    std::vector<address> addresses_;
    std::size_t next_address_ = 0;
    int last_error_ = ECONNREFUSED;
    int fd_ = -1;
};

}  // namespace

std::unique_ptr<transport> make_socket_transport(const redis_endpoint& endpoint) {
    return std::make_unique<socket_transport>(endpoint);
}

std::unique_ptr<transport> make_transport(const redis_endpoint& endpoint, std::error_code& ec) {
    ec.clear();
    if (endpoint.kind == redis_endpoint::transport::tls) return make_tls_transport(endpoint, ec);
    return make_socket_transport(endpoint);
}

}  // namespace dlock::redis::detail
