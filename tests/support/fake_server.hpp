// A TCP listener on 127.0.0.1 that is not the server a client expects: it accepts every
// connection and answers each one's first read with `answer` (never, when `answer` is empty),
// keeping it open until the fake server goes. For the errors a client must name when the port
// holds something else (an HTTP server, a silent peer).
#pragma once

#include <cstdint>
#include <string>
#include <thread>

namespace dlock::test {

class fake_server {
public:
    explicit fake_server(std::string answer);
    ~fake_server();
    fake_server(const fake_server&) = delete;
    fake_server& operator=(const fake_server&) = delete;

    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

private:
    void serve(const std::stop_token& stop);

    std::string answer_;
    int fd_ = -1;
    std::uint16_t port_ = 0;
    std::jthread thread_;
};

}  // namespace dlock::test
