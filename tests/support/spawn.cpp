#include "spawn.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace dlock::test::detail {

pid_t spawn(const std::string& path, const std::vector<std::string>& argv, int out_fd) {
    // Everything the child needs is prepared before fork: between fork and exec only
    // async-signal-safe calls are allowed (other threads may hold malloc's locks).
    std::vector<char*> cargv;
    cargv.reserve(argv.size() + 1);
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    const bool main_thread = ::gettid() == ::getpid();
    const pid_t parent = ::getpid();
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

    const pid_t pid = ::fork();
    if (pid < 0) {
        const int err = errno;
        if (devnull >= 0) ::close(devnull);
        throw std::runtime_error(std::string("fork: ") + std::strerror(err));
    }
    if (pid == 0) {
        if (main_thread) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
        }
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
        if (out_fd >= 0) {
            ::dup2(out_fd, STDOUT_FILENO);
            ::dup2(out_fd, STDERR_FILENO);
        }
        ::close_range(3, ~0U, 0);
        ::execv(path.c_str(), cargv.data());
        ::_exit(127);
    }
    if (devnull >= 0) ::close(devnull);
    return pid;
}

int wait_blocking(pid_t pid) {
    int status = 0;
    for (;;) {
        if (::waitpid(pid, &status, 0) == pid) return status;
        if (errno != EINTR) return -1;
    }
}

bool wait_for(pid_t pid, std::chrono::milliseconds timeout, int& raw_status) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            raw_status = status;
            return true;
        }
        if (r < 0 && errno != EINTR) {  // ECHILD: already reaped elsewhere
            raw_status = -1;
            return true;
        }
        const auto now = clock::now();
        if (now >= deadline) return false;
        std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
        pause = std::min(pause * 2, std::chrono::milliseconds(10));
    }
}

void terminate(pid_t& pid, std::chrono::milliseconds grace) {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    ::kill(pid, SIGCONT);
    int raw = 0;
    if (wait_for(pid, grace, raw)) {
        pid = -1;
        return;
    }
    kill_now(pid);
}

void kill_now(pid_t& pid) {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    wait_blocking(pid);
    pid = -1;
}

int decode_status(int raw_status) {
    if (raw_status == -1) return -1;
    if (WIFEXITED(raw_status)) return WEXITSTATUS(raw_status);
    if (WIFSIGNALED(raw_status)) return 128 + WTERMSIG(raw_status);
    return -1;
}

}  // namespace dlock::test::detail
