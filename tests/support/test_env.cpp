#include "test_env.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace dlock::test {

namespace {

double read_time_scale() {
    const char* text = std::getenv("DLOCK_TEST_TIME_SCALE");
    if (text == nullptr || *text == '\0') return 1.0;
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !std::isfinite(value) || value <= 0.0) {
        return 1.0;
    }
    return value;
}

}  // namespace

double time_scale() {
    static const double scale = read_time_scale();
    return scale;
}

std::chrono::milliseconds scaled(std::chrono::milliseconds d) {
    const double ms = static_cast<double>(d.count()) * time_scale();
    return std::chrono::milliseconds(ms <= 0.0 ? 0 : std::llround(ms));
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + scaled(timeout);
    auto pause = std::chrono::milliseconds(2);
    for (;;) {
        if (pred()) return true;
        const auto now = clock::now();
        if (now >= deadline) return pred();
        std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
        pause = std::min(pause * 2, std::chrono::milliseconds(10));
    }
}

std::string unique_name(std::string_view hint) {
    static std::atomic<unsigned long> counter{0};
    std::string name;
    const testing::TestInfo* info = testing::UnitTest::GetInstance()
                                        ? testing::UnitTest::GetInstance()->current_test_info()
                                        : nullptr;
    if (info != nullptr) {
        name.append(info->test_suite_name()).append(".").append(info->name());
    } else {
        name = "no_test";
    }
    if (!hint.empty()) name.append("/").append(hint);
    name.append("/")
        .append(std::to_string(::getpid()))
        .append(".")
        .append(std::to_string(counter.fetch_add(1) + 1));
    return name;
}

std::uint16_t free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("free_port: socket: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        const int err = errno;
        ::close(fd);
        throw std::runtime_error(std::string("free_port: bind: ") + std::strerror(err));
    }
    ::close(fd);
    return ntohs(addr.sin_port);
}

void start_on_free_ports(const std::function<void()>& start,
                         const std::function<bool()>& port_taken,
                         const std::function<void()>& clean_up, int attempts) {
    for (int attempt = 1;; ++attempt) {
        try {
            start();
            return;
        } catch (...) {
            const bool again = attempt < attempts && port_taken();
            clean_up();
            if (!again) throw;
        }
    }
}

}  // namespace dlock::test
