#include "fake_server.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <vector>

namespace dlock::test {

fake_server::fake_server(std::string answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        if (fd_ >= 0) ::close(fd_);
        throw std::runtime_error("fake_server: cannot listen");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::jthread([this](std::stop_token stop) { serve(stop); });
}

fake_server::~fake_server() {
    thread_.request_stop();
    ::shutdown(fd_, SHUT_RDWR);  // ends the accept() the thread blocks in
    thread_.join();
    ::close(fd_);
}

void fake_server::serve(const std::stop_token& stop) {
    std::vector<int> clients;
    while (!stop.stop_requested()) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) break;
        clients.push_back(c);
        if (!answer_.empty()) {
            char buf[512];
            if (::recv(c, buf, sizeof buf, 0) > 0) {
                [[maybe_unused]] auto n = ::send(c, answer_.data(), answer_.size(), MSG_NOSIGNAL);
            }
        }
    }
    for (int c : clients) ::close(c);
}

}  // namespace dlock::test
