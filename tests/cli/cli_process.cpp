#include "cli_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "test_env.hpp"

#ifndef DLOCK_CLI_PATH
#error "DLOCK_CLI_PATH must name the dlock binary (tests/cli/CMakeLists.txt)"
#endif

extern char** environ;  // NOLINT: POSIX global

namespace dlock::test {
namespace {

int decode(int raw) {
    if (WIFEXITED(raw)) return WEXITSTATUS(raw);
    if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
    return -1;
}

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

}  // namespace

std::string etcd_connect_timeout() {
    return std::to_string(scaled(std::chrono::seconds(10)).count()) + "ms";
}

std::string vote_bound() { return std::to_string(scaled(std::chrono::seconds(1)).count()) + "ms"; }

std::string cli_binary() {
    const char* other = std::getenv("DLOCK_TEST_CLI_BINARY");  // NOLINT(concurrency-mt-unsafe)
    return other != nullptr && *other != '\0' ? std::string(other) : std::string(DLOCK_CLI_PATH);
}

cli_process::cli_process(std::vector<std::string> args, const cli_options& options)
    : args_(std::move(args)), dir_("dlock-cli-test") {
    // The environment: ours without DLOCK_URL (tests name their server), plus options.env.
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry(*e);
        if (name_of(entry) == "DLOCK_URL") continue;
        bool replaced = false;
        for (const auto& extra : options.env)
            replaced = replaced || name_of(extra) == name_of(entry);
        if (!replaced) env.push_back(entry);
    }
    for (const auto& extra : options.env) env.push_back(extra);
    if (options.tty_stderr) env.emplace_back("TERM=xterm");

    std::vector<std::string> argv = {cli_binary()};
    argv.insert(argv.end(), args_.begin(), args_.end());
    std::vector<char*> c_argv, c_env;
    for (auto& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    for (auto& e : env) c_env.push_back(e.data());
    c_env.push_back(nullptr);

    const int in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out_fd = ::open((dir_ / "out.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    int err_fd = -1;
    if (options.tty_stderr) {
        tty_master_ = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (tty_master_ < 0 || ::grantpt(tty_master_) != 0 || ::unlockpt(tty_master_) != 0) {
            throw std::runtime_error("cannot open a pseudo-terminal");
        }
        char slave[128] = {};
        if (::ptsname_r(tty_master_, slave, sizeof slave) != 0) {
            throw std::runtime_error("ptsname_r failed");
        }
        err_fd = ::open(slave, O_RDWR | O_NOCTTY | O_CLOEXEC);
        ::fcntl(tty_master_, F_SETFL, O_NONBLOCK);
    } else {
        err_fd = ::open((dir_ / "err.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    }
    if (in_fd < 0 || out_fd < 0 || err_fd < 0) throw std::runtime_error("cannot open output files");

    // Prepared above: between fork and exec only async-signal-safe calls.
    const pid_t parent = ::getpid();
    const bool main_thread = ::gettid() == ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (main_thread) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test
            if (::getppid() != parent) ::_exit(127);
        }
        // A session of its own: no controlling terminal, whatever the test was started from, so
        // dlock's terminal handling is only exercised where a test asks for it (pty_shell).
        ::setsid();
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread
        ::dup2(in_fd, STDIN_FILENO);
        ::dup2(out_fd, STDOUT_FILENO);
        ::dup2(err_fd, STDERR_FILENO);
        ::close_range(3, ~0U, 0);  // nothing of the test's (or of whoever started it) leaks in
        ::execve(c_argv[0], c_argv.data(), c_env.data());
        ::_exit(127);
    }
    const int fork_errno = errno;
    ::close(in_fd);
    ::close(out_fd);
    ::close(err_fd);
    if (pid < 0)
        throw std::runtime_error(std::string("fork: ") +
                                 std::generic_category().message(fork_errno));
    pid_ = pid;
}

cli_process::~cli_process() {
    if (pid_ > 0 && status_ < 0) {
        ::kill(pid_, SIGKILL);
        int raw = 0;
        while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
        }
    }
    if (tty_master_ >= 0) ::close(tty_master_);
}

void cli_process::send(int sig) const {
    if (status_ < 0) ::kill(pid_, sig);
}

bool cli_process::running() {
    if (status_ >= 0) return false;
    int raw = 0;
    if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
        status_ = decode(raw);
        return false;
    }
    return true;
}

std::string cli_process::out() const { return read_text(dir_ / "out.txt"); }

std::string cli_process::err() {
    if (tty_master_ < 0) return read_text(dir_ / "err.txt");
    drain_tty();
    return tty_text_;
}

void cli_process::drain_tty() {
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(tty_master_, buf, sizeof buf);
        if (n > 0) {
            tty_text_.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return;  // EAGAIN (nothing more for now) or EIO (no writer left)
    }
}

cli_result cli_process::wait(std::chrono::milliseconds timeout) {
    // Keep draining the pseudo-terminal while waiting: a full one would block dlock's writes.
    const bool exited = eventually(
        [&] {
            if (tty_master_ >= 0) drain_tty();
            return !running();
        },
        timeout);
    if (!exited) {
        ::kill(pid_, SIGKILL);
        int raw = 0;
        while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
        }
        status_ = decode(raw);
        std::string command = "dlock";
        for (const auto& a : args_) command += " " + a;
        throw std::runtime_error(command + ": still running after " +
                                 std::to_string(scaled(timeout).count()) + " ms; stderr: " + err());
    }
    return {status_, out(), err()};
}

cli_result run_cli(std::vector<std::string> args, const cli_options& options,
                   std::chrono::milliseconds timeout) {
    cli_process p(std::move(args), options);
    return p.wait(timeout);
}

}  // namespace dlock::test
