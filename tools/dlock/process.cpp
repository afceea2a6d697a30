#include "process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli.hpp"

extern char** environ;  // NOLINT: POSIX global, used for posix_spawnp

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

sigset_t handled_set() {
    sigset_t set;
    sigemptyset(&set);
    for (const int sig : handled_signals) sigaddset(&set, sig);
    return set;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
    std::vector<char*> out;
    out.reserve(strings.size() + 1);
    for (auto& s : strings) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
}

/// An executable named `name` on $PATH, or "" if there is none.
std::string find_on_path(const std::string& name) {
    const std::string path = env_value("PATH");
    std::stringstream dirs(!path.empty() ? path : "/usr/local/bin:/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (dir.empty()) dir = ".";
        std::string candidate = dir;
        candidate += '/';
        candidate += name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return "";
}

/// A port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0).
unsigned short free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    unsigned short port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        port = ntohs(addr.sin_port);
    }
    ::close(fd);
    return port;
}

/// One PING over a fresh TCP connection, bounded by `timeout`. True on "+PONG".
bool answers_ping(unsigned short port, std::chrono::milliseconds timeout) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
        pollfd p{fd, POLLIN, 0};
        char buf[16] = {};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
            ::recv(fd, buf, sizeof buf - 1, 0) > 0) {
            ok = std::string_view(buf).starts_with("+PONG");
        }
    }
    ::close(fd);
    return ok;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

std::string env_value(const char* name) {
    const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): see the header
    return value != nullptr ? std::string(value) : std::string();
}

std::string errno_text(int error) { return std::generic_category().message(error); }

// --- signals ---------------------------------------------------------------------------------

signal_watch::signal_watch() {
    const sigset_t set = handled_set();
    if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) {
        throw cli_error(exit_status::os_error, "cannot block signals");
    }
    fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0) {
        throw cli_error(exit_status::os_error,
                        fmt::format("signalfd failed: {}", errno_text(errno)));
    }
}

signal_watch::~signal_watch() {
    if (fd_ >= 0) ::close(fd_);
}

std::optional<signalfd_siginfo> signal_watch::next() {
    signalfd_siginfo info{};
    for (;;) {
        const ssize_t n = ::read(fd_, &info, sizeof info);
        if (n == static_cast<ssize_t>(sizeof info)) return info;
        if (n < 0 && errno == EINTR) continue;
        return std::nullopt;  // EAGAIN: nothing pending
    }
}

void die_by_signal(int sig) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(sig);
    std::_Exit(128 + sig);  // a signal whose default action is to be ignored
}

std::string signal_name(int sig) {
    if (const char* abbrev = ::sigabbrev_np(sig)) return std::string("SIG") + abbrev;
    return fmt::format("signal {}", sig);
}

// --- processes -------------------------------------------------------------------------------

pid_t spawn_process(const std::vector<std::string>& argv, const spawn_options& options,
                    int& error) {
    error = 0;
    std::vector<std::string> args = argv;
    auto c_args = c_strings(args);
    std::vector<std::string> env_copy;
    std::vector<char*> c_env;
    char** envp = environ;
    if (options.environment) {
        env_copy = *options.environment;
        c_env = c_strings(env_copy);
        envp = c_env.data();
    }

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    sigset_t empty;
    sigemptyset(&empty);
    posix_spawnattr_setsigmask(&attr, &empty);
    sigset_t defaults = handled_set();
    sigaddset(&defaults, SIGPIPE);  // dlock ignores it; the command must not inherit that
    posix_spawnattr_setsigdefault(&attr, &defaults);
    if (options.new_process_group || options.process_group != 0) {
        flags |= POSIX_SPAWN_SETPGROUP;
        posix_spawnattr_setpgroup(&attr, options.new_process_group ? 0 : options.process_group);
    }
    posix_spawnattr_setflags(&attr, flags);

    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, c_args[0], nullptr, &attr, c_args.data(), envp);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        error = rc;
        return -1;
    }
    return pid;
}

int decode_wait_status(int raw_status) {
    if (WIFEXITED(raw_status)) return WEXITSTATUS(raw_status);
    if (WIFSIGNALED(raw_status)) return 128 + WTERMSIG(raw_status);
    return exit_status::internal;
}

// --- embedded redis-server -------------------------------------------------------------------

embedded_redis::embedded_redis() {
    binary_ = env_value("DLOCK_REDIS_SERVER");
    if (binary_.empty()) binary_ = find_on_path("redis-server");
    if (binary_.empty()) {
        throw cli_error(exit_status::unavailable,
                        "redis-server is not on PATH: install it (Debian: apt-get install "
                        "redis-server) or point the demo at a server with --url redis://HOST:PORT");
    }
    const std::string tmp = env_value("TMPDIR");
    std::string templ = (tmp.empty() ? std::string("/tmp") : tmp) + "/dlock-demo.XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
        throw cli_error(exit_status::os_error,
                        fmt::format("cannot create a temp dir {}: {}", templ, errno_text(errno)));
    }
    dir_ = templ;
    // The port may be taken between choosing it and the server binding it: try a few.
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
        if (start_on(free_port(), why)) return;
    }
    const std::string log = read_file(dir_ + "/redis.log");
    remove();
    throw cli_error(exit_status::unavailable,
                    fmt::format("could not start {}: {}{}{}", binary_, why,
                                log.empty() ? "" : "; its log ends with: ",
                                log.substr(log.size() > 300 ? log.size() - 300 : 0)));
}

embedded_redis::~embedded_redis() { remove(); }

std::string embedded_redis::url() const { return fmt::format("redis://127.0.0.1:{}", port_); }

bool embedded_redis::start_on(unsigned short port, std::string& why) {
    if (port == 0) {
        why = "no free port on 127.0.0.1";
        return false;
    }
    const std::string log = dir_ + "/redis.log";
    std::error_code ignored;
    std::filesystem::remove(log,
                            ignored);  // an earlier attempt's "Ready" must not fool the check below
    std::vector<std::string> args = {
        binary_,  "--port", std::to_string(port), "--bind", "127.0.0.1", "--dir", dir_,
        "--save", "",       "--appendonly",       "no",     "--logfile", log,     "--daemonize",
        "no"};
    auto argv = c_strings(args);
    const pid_t parent = ::getpid();
    // fork + exec rather than posix_spawn for PR_SET_PDEATHSIG: a server must not outlive a
    // killed dlock. Only async-signal-safe calls between fork and exec.
    const pid_t pid = ::fork();
    if (pid < 0) {
        why = fmt::format("fork failed: {}", errno_text(errno));
        return false;
    }
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);  // dlock died before prctl took effect
        ::setpgid(0, 0);                          // the terminal's Ctrl-C is dlock's to handle
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread
        ::signal(SIGPIPE, SIG_DFL);
        const int devnull = ::open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            ::dup2(devnull, STDIN_FILENO);
            ::dup2(devnull, STDOUT_FILENO);
            ::dup2(devnull, STDERR_FILENO);
        }
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    pid_ = pid;
    port_ = port;
    const auto deadline = steady::now() + 10s;
    while (steady::now() < deadline) {
        int raw = 0;
        if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
            pid_ = -1;
            why = fmt::format("it exited with status {} (port {} taken?)", decode_wait_status(raw),
                              port);
            return false;
        }
        // Our server logs "Ready" only once it listens, so a PONG after that comes from it and
        // not from whoever else might hold the port.
        const std::string text = read_file(log);
        if (text.find("Ready to accept connections") != std::string::npos &&
            answers_ping(port, 2s)) {
            const auto at = text.find("version=");
            if (at != std::string::npos) {
                version_ = text.substr(at + 8, text.find_first_of(", \n", at + 8) - at - 8);
            }
            return true;
        }
        std::this_thread::sleep_for(10ms);  // start-up has no notification to wait on
    }
    why = "it did not answer PING within 10 s";
    stop_server();
    return false;
}

void embedded_redis::stop_server() noexcept {
    if (pid_ > 0) {
        ::kill(pid_, SIGTERM);
        int raw = 0;
        const auto deadline = steady::now() + 5s;
        bool exited = false;
        while (steady::now() < deadline) {
            if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
                exited = true;
                break;
            }
            std::this_thread::sleep_for(5ms);
        }
        if (!exited) {
            ::kill(pid_, SIGKILL);
            while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
            }
        }
        pid_ = -1;
    }
}

void embedded_redis::remove() noexcept {
    stop_server();
    if (!dir_.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        dir_.clear();
    }
}

}  // namespace dlock::cli
