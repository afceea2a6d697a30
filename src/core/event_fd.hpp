// A non-blocking eventfd that wakes a thread sleeping in poll(2): signal() from any thread, the
// sleeper polls fd() for POLLIN and drain()s it. Closed by its destructor or close() (a forked
// child's copy, an engine that stops); signal() on a closed one does nothing.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace dlock::detail {

class event_fd {
public:
    event_fd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
        if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
    }
    ~event_fd() { close(); }
    event_fd(const event_fd&) = delete;
    event_fd& operator=(const event_fd&) = delete;

    int fd() const noexcept { return fd_; }

    void signal() const noexcept {
        if (fd_ < 0) return;
        const std::uint64_t one = 1;
        [[maybe_unused]] const auto n = ::write(fd_, &one, sizeof one);
    }

    /// Consumes every signal so far (call once poll(2) reported POLLIN).
    void drain() const noexcept {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto n = ::read(fd_, &count, sizeof count);
    }

    void close() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_;
};

}  // namespace dlock::detail
