// Small taps on a Redis server for tests that need to see, slow or break the wire:
//
//   reply_cutter    a TCP proxy in front of a server. The first connection whose request bytes
//                   contain `trigger` is cut (both sockets closed) when the server's answer to it
//                   arrives, so the request has certainly run on the server but its reply is
//                   lost: the client sees the connection close. Every other byte is forwarded as
//                   is.
//   request_holder  a TCP proxy in front of a server that holds back, on every connection, the
//                   request bytes from the first chunk containing `trigger` on, until
//                   let_through(): the server has certainly not run that request before then
//                   (e.g. a SUBSCRIBE that must land late). Replies, and every other connection,
//                   pass as is.
//   reply_delayer   a TCP proxy in front of a server that forwards the server's bytes `delay`
//                   after they arrived (requests at once, order kept): every round trip through
//                   it takes at least `delay`, as to a distant server.
//   monitor_tap   a MONITOR connection that collects the commands the server runs (scripts'
//                 commands included, as `[0 lua] "CMD" "arg" ...` lines); runs_script() tells
//                 a line that runs a script on a lock key.
//
// Header-only, POSIX sockets, 127.0.0.1 only. Each object runs its own threads and stops them in
// its destructor.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace dlock::test {

namespace tap_detail {

inline int connect_local(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(fd);
        throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + " failed");
    }
    return fd;
}

/// A listening socket on a free 127.0.0.1 port, which goes to `port`.
inline int listen_local(std::uint16_t& port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) || ::listen(fd, 64)) {
        if (fd >= 0) ::close(fd);
        throw std::runtime_error("cannot listen on 127.0.0.1");
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    return fd;
}

inline bool write_all(int fd, const char* data, std::size_t n) {
    while (n > 0) {
        const auto w = ::send(fd, data, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        data += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

/// Accepts connections on a free 127.0.0.1 port and runs `serve(client, server)` on a thread of
/// its own for each, `server` a fresh connection to 127.0.0.1:`upstream`. serve() returns when
/// stopping() or a side closed, and closes both sockets. The destructor stops accepting and joins
/// every thread: declare a relay after everything serve() uses, so that it goes first.
class relay {
public:
    relay(std::uint16_t upstream, std::function<void(int client, int server)> serve)
        : upstream_(upstream), serve_(std::move(serve)) {
        listen_fd_ = listen_local(port_);
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    ~relay() {
        stop_ = true;
        acceptor_.join();
        for (auto& t : pipes_) t.join();  // the acceptor, the only other user, has stopped
        ::close(listen_fd_);
    }
    relay(const relay&) = delete;
    relay& operator=(const relay&) = delete;

    std::uint16_t port() const { return port_; }
    bool stopping() const { return stop_.load(); }

private:
    void accept_loop() {
        while (!stop_) {
            pollfd p{listen_fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) continue;
            int server = -1;
            try {
                server = connect_local(upstream_);
            } catch (...) {
                ::close(client);
                continue;
            }
            pipes_.emplace_back([this, client, server] { serve_(client, server); });
        }
    }

    std::uint16_t upstream_;
    std::function<void(int, int)> serve_;
    int listen_fd_ = -1;
    std::uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::vector<std::thread> pipes_;  // the acceptor thread's only, until the destructor
    std::thread acceptor_;
};

}  // namespace tap_detail

class reply_cutter {
public:
    reply_cutter(std::uint16_t upstream_port, std::string trigger)
        : trigger_(std::move(trigger)),
          relay_(upstream_port, [this](int client, int server) { pipe(client, server); }) {}

    reply_cutter(const reply_cutter&) = delete;
    reply_cutter& operator=(const reply_cutter&) = delete;

    std::string url() const { return "redis://127.0.0.1:" + std::to_string(relay_.port()); }
    /// True once a connection was cut.
    bool cut() const { return cut_.load(); }

private:
    void pipe(int client, int server) {
        std::string requests;  // what this client sent, for the trigger match
        bool doomed = false;   // sent the trigger: its next answer is dropped
        char buf[16384];
        while (!relay_.stopping()) {
            pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
            if (::poll(p, 2, 20) <= 0) continue;
            if (p[0].revents) {
                const auto n = ::recv(client, buf, sizeof buf, 0);
                if (n <= 0 || !tap_detail::write_all(server, buf, static_cast<std::size_t>(n)))
                    break;
                if (!doomed && !cut_) {
                    requests.append(buf, static_cast<std::size_t>(n));
                    doomed = requests.find(trigger_) != std::string::npos;
                }
            }
            if (p[1].revents) {
                const auto n = ::recv(server, buf, sizeof buf, 0);
                if (n <= 0) break;
                if (doomed && !cut_.exchange(true)) break;  // ran on the server, reply lost
                if (!tap_detail::write_all(client, buf, static_cast<std::size_t>(n))) break;
            }
        }
        ::close(client);
        ::close(server);
    }

    std::string trigger_;
    std::atomic<bool> cut_{false};
    tap_detail::relay relay_;  // last: stops and joins the pipes before the members they use go
};

class reply_delayer {
public:
    reply_delayer(std::uint16_t upstream_port, std::chrono::milliseconds delay)
        : delay_(delay),
          relay_(upstream_port, [this](int client, int server) { pipe(client, server); }) {}

    reply_delayer(const reply_delayer&) = delete;
    reply_delayer& operator=(const reply_delayer&) = delete;

    std::string url() const { return "redis://127.0.0.1:" + std::to_string(relay_.port()); }

private:
    void pipe(int client, int server) {
        using clock = std::chrono::steady_clock;
        std::deque<std::pair<clock::time_point, std::string>> due;  // the server's bytes, by when
        char buf[16384];
        while (!relay_.stopping()) {
            const auto now = clock::now();
            bool open = true;
            while (open && !due.empty() && due.front().first <= now) {
                const auto& [at, bytes] = due.front();
                open = tap_detail::write_all(client, bytes.data(), bytes.size());
                due.pop_front();
            }
            if (!open) break;
            auto wait = std::chrono::milliseconds(20);
            if (!due.empty()) {
                wait = std::min(
                    wait, std::chrono::ceil<std::chrono::milliseconds>(due.front().first - now));
            }
            pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
            if (::poll(p, 2, static_cast<int>(wait.count())) <= 0) continue;
            if (p[0].revents) {
                const auto n = ::recv(client, buf, sizeof buf, 0);
                if (n <= 0 || !tap_detail::write_all(server, buf, static_cast<std::size_t>(n)))
                    break;
            }
            if (p[1].revents) {
                const auto n = ::recv(server, buf, sizeof buf, 0);
                if (n <= 0) break;
                due.emplace_back(clock::now() + delay_,
                                 std::string(buf, static_cast<std::size_t>(n)));
            }
        }
        ::close(client);
        ::close(server);
    }

    std::chrono::milliseconds delay_;
    tap_detail::relay relay_;  // last: stops and joins the pipes before the members they use go
};

class request_holder {
public:
    request_holder(std::uint16_t upstream_port, std::string trigger)
        : trigger_(std::move(trigger)),
          relay_(upstream_port, [this](int client, int server) { pipe(client, server); }) {}

    request_holder(const request_holder&) = delete;
    request_holder& operator=(const request_holder&) = delete;

    std::string url() const { return "redis://127.0.0.1:" + std::to_string(relay_.port()); }
    /// True while some connection's request containing `trigger` is held back.
    bool holding() const {
        std::lock_guard lock(mutex_);
        return !released_ && !held_.empty();
    }
    /// Forwards everything held back, before returning, and holds nothing from then on.
    void let_through() {
        std::lock_guard lock(mutex_);
        released_ = true;
        for (auto& [server, bytes] : held_)
            tap_detail::write_all(server, bytes.data(), bytes.size());
        held_.clear();
    }

private:
    void pipe(int client, int server) {
        std::string tail;  // the latest request bytes, for a trigger split between two chunks
        char buf[16384];
        while (!relay_.stopping()) {
            pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
            if (::poll(p, 2, 20) <= 0) continue;
            if (p[0].revents) {
                const auto n = ::recv(client, buf, sizeof buf, 0);
                if (n <= 0) break;
                const std::string_view chunk(buf, static_cast<std::size_t>(n));
                const auto recent = tail + std::string(chunk);
                tail = recent.substr(recent.size() - std::min(recent.size(), trigger_.size()));
                std::lock_guard lock(mutex_);  // orders this against let_through()
                const bool hold = held_.contains(server) || recent.find(trigger_) != recent.npos;
                if (!released_ && hold) {
                    held_[server].append(chunk);
                } else if (!tap_detail::write_all(server, chunk.data(), chunk.size())) {
                    break;
                }
            }
            if (p[1].revents) {
                const auto n = ::recv(server, buf, sizeof buf, 0);
                if (n <= 0 || !tap_detail::write_all(client, buf, static_cast<std::size_t>(n)))
                    break;
            }
        }
        std::lock_guard lock(mutex_);
        held_.erase(server);
        ::close(client);
        ::close(server);
    }

    std::string trigger_;
    // Guards released_, held_ and every send of request bytes (so none overtakes let_through()).
    mutable std::mutex mutex_;
    bool released_ = false;
    std::unordered_map<int, std::string> held_;  // server socket -> request bytes held back
    tap_detail::relay relay_;  // last: stops and joins the pipes before the members they use go
};

/// Whether MONITOR line `line` runs the script whose function is `function` on lock key `key`
/// (not a command inside it): FCALL, as dlock runs its scripts on a server with Redis Functions.
inline bool runs_script(const std::string& line, std::string_view function,
                        const std::string& key) {
    return line.find("[0 lua]") == std::string::npos &&
           line.find("\"FCALL\" \"" + std::string(function) + "\"") != std::string::npos &&
           line.find("\"" + key + "\"") != std::string::npos;
}

class monitor_tap {
public:
    /// Connects, sends MONITOR and returns once the server confirmed it.
    explicit monitor_tap(std::uint16_t port) : fd_(tap_detail::connect_local(port)) {
        const std::string cmd = "MONITOR\r\n";
        tap_detail::write_all(fd_, cmd.data(), cmd.size());
        while (buffer_.find("+OK\r\n") == std::string::npos) {
            if (!read_some(std::chrono::seconds(5))) throw std::runtime_error("MONITOR: no +OK");
        }
        buffer_.erase(0, buffer_.find("+OK\r\n") + 5);
    }
    ~monitor_tap() { ::close(fd_); }
    monitor_tap(const monitor_tap&) = delete;
    monitor_tap& operator=(const monitor_tap&) = delete;

    /// Reads until a line containing `marker` arrived (or `timeout`) and returns every complete
    /// line read so far (without the "+" and "\r\n"), dropping them from the tap.
    std::vector<std::string> lines_until(const std::string& marker,
                                         std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (buffer_.find(marker) == std::string::npos ||
               buffer_.find("\r\n", buffer_.find(marker)) == std::string::npos) {
            const auto left = deadline - std::chrono::steady_clock::now();
            if (left <= std::chrono::milliseconds::zero() ||
                !read_some(std::chrono::duration_cast<std::chrono::milliseconds>(left)))
                break;
        }
        std::vector<std::string> out;
        std::size_t at = 0;
        for (auto end = buffer_.find("\r\n"); end != std::string::npos;
             end = buffer_.find("\r\n", at)) {
            auto line = buffer_.substr(at, end - at);
            if (!line.empty() && line.front() == '+') line.erase(0, 1);
            out.push_back(std::move(line));
            at = end + 2;
        }
        buffer_.erase(0, at);
        return out;
    }

private:
    bool read_some(std::chrono::milliseconds timeout) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
        char buf[16384];
        const auto n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) return false;
        buffer_.append(buf, static_cast<std::size_t>(n));
        return true;
    }

    int fd_;
    std::string buffer_;
};

}  // namespace dlock::test
