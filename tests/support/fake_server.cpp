#include "fake_server.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "redis_tap.hpp"

namespace dlock::test {

fake_server::fake_server(std::string answer) : answer_(std::move(answer)) {
    fd_ = tap_detail::listen_local(port_);
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
