#include "process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
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

// --- what dlock inherited (written once by record_inherited(), before any thread) ------------

sigset_t inherited_ignored_set;  // signals whose disposition was SIG_IGN at start
// Descriptors above 2 open at start, ascending: passed on to the command. Fixed storage, so the
// child reads it between fork and exec without allocating.
std::array<int, 1024> inherited_fds{};
std::size_t inherited_fd_count = 0;
int max_fd = 1024;  // for closing descriptors one by one where close_range(2) is missing

void close_fds(int low, int high) noexcept {
    if (low > high) return;
    if (::close_range(static_cast<unsigned>(low), static_cast<unsigned>(high), 0) == 0) return;
    for (int fd = low; fd <= std::min(high, max_fd); ++fd) ::close(fd);
}

/// Closes every descriptor above 2 except `keep` (ascending). Async-signal-safe.
void close_fds_except(const int* keep, std::size_t count) noexcept {
    int low = 3;
    for (std::size_t i = 0; i < count; ++i) {
        if (keep[i] < low) continue;
        close_fds(low, keep[i] - 1);
        low = keep[i] + 1;
    }
    close_fds(low, INT_MAX);
}

/// Fields of /proc/<pid>/stat: the state letter and the process group; false if gone.
bool read_stat(const char* pid, char& state, long& pgrp) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%s/stat", pid);
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char* paren = std::strrchr(buf, ')');  // the command name may contain ')'
    if (paren == nullptr) return false;
    long ppid = 0;
    return std::sscanf(paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3;
}

/// An executable file `name` on $PATH (or `name` itself if it has a '/'); "" and `error` set to
/// ENOENT (nothing found) or EACCES (found, but not executable) otherwise.
std::string resolve_command(const std::string& name, int& error) {
    const auto executable = [](const std::string& path) {
        struct stat st {};
        return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
               ::access(path.c_str(), X_OK) == 0;
    };
    error = ENOENT;
    if (name.empty()) return "";
    if (name.find('/') != std::string::npos) {
        if (executable(name)) return name;
        error = ::access(name.c_str(), F_OK) == 0 ? EACCES : ENOENT;
        return "";
    }
    const std::string path = env_value("PATH");
    std::stringstream dirs(!path.empty() ? path : "/usr/local/bin:/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
        if (executable(candidate)) return candidate;
        if (::access(candidate.c_str(), F_OK) == 0) error = EACCES;
    }
    return "";
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
        // push_back, not dir = ".": that assignment makes GCC 12 at -O3 report a false -Wrestrict.
        if (dir.empty()) dir.push_back('.');
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

namespace {

// main()'s argv, for the watchdog to overwrite with its own name in its copy of the memory.
char** saved_argv = nullptr;
int saved_argc = 0;

/// Renames the calling process (a fork of dlock) to `name`: the thread name (ps -o comm, top) and
/// the command line (ps -o args, /proc/PID/cmdline), by overwriting argv's strings, which lie end
/// to end in memory. Async-signal-safe.
void rename_process(const char* name) noexcept {
    ::prctl(PR_SET_NAME, name);
    if (saved_argv == nullptr || saved_argc < 1 || saved_argv[0] == nullptr) return;
    char* const begin = saved_argv[0];
    char* end = begin;
    for (int i = 0; i < saved_argc && saved_argv[i] != nullptr; ++i) {
        if (saved_argv[i] != end) break;  // not contiguous: stop at what is
        end = saved_argv[i] + std::strlen(saved_argv[i]) + 1;
    }
    const std::size_t room = static_cast<std::size_t>(end - begin);
    if (room == 0) return;
    std::memset(begin, 0, room);
    std::memcpy(begin, name, std::min(std::strlen(name), room - 1));
}

std::int64_t monotonic_ns() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void record_inherited(int argc, char** argv) {
    saved_argc = argc;
    saved_argv = argv;
    sigemptyset(&inherited_ignored_set);
    for (int sig = 1; sig < NSIG; ++sig) {
        struct sigaction old {};
        if (sig != SIGKILL && sig != SIGSTOP && ::sigaction(sig, nullptr, &old) == 0 &&
            old.sa_handler == SIG_IGN) {
            sigaddset(&inherited_ignored_set, sig);
        }
    }
    if (sigismember(&inherited_ignored_set, SIGCHLD)) ::signal(SIGCHLD, SIG_DFL);  // to wait

    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
        max_fd = static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20));
    inherited_fd_count = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
        while (const dirent* entry = ::readdir(dir)) {
            const int fd = std::atoi(entry->d_name);
            if (fd > 2 && fd != ::dirfd(dir) && inherited_fd_count < inherited_fds.size())
                inherited_fds[inherited_fd_count++] = fd;
        }
        ::closedir(dir);
    } else {
        for (int fd = 3; fd < std::min(max_fd, 1024); ++fd) {
            if (::fcntl(fd, F_GETFD) >= 0 && inherited_fd_count < inherited_fds.size())
                inherited_fds[inherited_fd_count++] = fd;
        }
    }
    std::sort(inherited_fds.begin(),
              inherited_fds.begin() + static_cast<std::ptrdiff_t>(inherited_fd_count));
}

bool inherited_ignored(int sig) { return sigismember(&inherited_ignored_set, sig) == 1; }

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

signal_watch::signal_watch(const std::vector<int>& signals, const std::vector<int>& also_block) {
    sigset_t set, block;
    sigemptyset(&set);
    for (const int sig : signals) sigaddset(&set, sig);
    block = set;
    for (const int sig : also_block) sigaddset(&block, sig);
    if (::pthread_sigmask(SIG_BLOCK, &block, nullptr) != 0) {
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
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
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

void stop_self() noexcept { ::kill(::getpid(), SIGSTOP); }

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

// --- the command of dlock run -----------------------------------------------------------------

command_child::command_child(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env) {
    const std::string path = resolve_command(argv.front(), error_);
    if (path.empty()) return;
    error_ = 0;
    std::vector<std::string> args = argv, env_copy = env;
    auto c_args = c_strings(args);
    auto c_env = c_strings(env_copy);
    int go[2], err[2];
    if (::pipe2(go, O_CLOEXEC) != 0) {
        throw cli_error(exit_status::os_error, fmt::format("pipe failed: {}", errno_text(errno)));
    }
    if (::pipe2(err, O_CLOEXEC) != 0) {
        const int e = errno;
        ::close(go[0]);
        ::close(go[1]);
        throw cli_error(exit_status::os_error, fmt::format("pipe failed: {}", errno_text(e)));
    }
    // What the child keeps: the descriptors dlock inherited, and the exec-error pipe (closed by
    // the exec itself).
    std::vector<int> keep(inherited_fds.begin(),
                          inherited_fds.begin() + static_cast<std::ptrdiff_t>(inherited_fd_count));
    keep.insert(std::upper_bound(keep.begin(), keep.end(), err[1]), err[1]);
    const pid_t parent = ::getpid();
    // Prepared above: between fork and exec only async-signal-safe calls.
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::setpgid(0, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);  // dlock died before prctl took effect
        ::close(go[1]);
        ::close(err[0]);
        char byte = 0;
        ssize_t n = 0;
        do {
            n = ::read(go[0], &byte, 1);
        } while (n < 0 && errno == EINTR);
        if (n != 1) ::_exit(127);  // dlock is gone, or gave up before go()
        ::close(go[0]);
        // Only ignored dispositions survive exec: give back those dlock changed.
        for (const int sig : {SIGPIPE, SIGCHLD}) {
            struct sigaction action {};
            action.sa_handler = sigismember(&inherited_ignored_set, sig) ? SIG_IGN : SIG_DFL;
            sigemptyset(&action.sa_mask);
            ::sigaction(sig, &action, nullptr);
        }
        close_fds_except(keep.data(), keep.size());
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread
        ::execve(path.c_str(), c_args.data(), c_env.data());
        const int e = errno;
        [[maybe_unused]] const auto w = ::write(err[1], &e, sizeof e);
        ::_exit(127);
    }
    const int fork_errno = errno;
    ::close(go[0]);
    ::close(err[1]);
    if (pid < 0) {
        ::close(go[1]);
        ::close(err[0]);
        throw cli_error(exit_status::os_error,
                        fmt::format("fork failed: {}", errno_text(fork_errno)));
    }
    ::setpgid(pid, pid);  // also here, so the group exists before go() whoever runs first
    pid_ = pid;
    go_fd_ = go[1];
    err_fd_ = err[0];
}

command_child::~command_child() {
    if (go_fd_ >= 0) ::close(go_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
}

int command_child::go() {
    const char byte = 'g';
    [[maybe_unused]] const auto w = ::write(go_fd_, &byte, 1);
    ::close(go_fd_);
    go_fd_ = -1;
    int e = 0;
    ssize_t n = 0;
    do {
        n = ::read(err_fd_, &e, sizeof e);
    } while (n < 0 && errno == EINTR);
    ::close(err_fd_);
    err_fd_ = -1;
    return n == static_cast<ssize_t>(sizeof e) ? e : 0;
}

// --- the watchdog --------------------------------------------------------------------------------

// A message on the watchdog's pipe: a kind byte and a 64-bit value, written in one write(2) (below
// PIPE_BUF, so atomic) and read whole. 'G': the group to kill; 'D': a deadline (CLOCK_MONOTONIC
// nanoseconds); 'Q': stand down.
constexpr std::size_t watchdog_message_size = 1 + sizeof(std::int64_t);

group_watchdog::group_watchdog() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        throw cli_error(exit_status::os_error, fmt::format("pipe failed: {}", errno_text(errno)));
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
        // A session of its own: no terminal signal reaches it, and stopping dlock or the
        // command's group does not stop it. It keeps nothing open but the pipe (not even the
        // terminal or dlock's output pipes, which it must not hold open). Only async-signal-safe
        // calls: dlock may already run threads when it forks this.
        ::setsid();
        rename_process("dlock-watchdog");
        const int in = fds[0];
        close_fds(0, in - 1);
        close_fds(in + 1, INT_MAX);
        std::int64_t pgid = 0;
        std::int64_t deadline = -1;  // none
        for (;;) {
            int timeout = -1;
            if (pgid > 0 && deadline >= 0) {
                const std::int64_t left = deadline - monotonic_ns();
                if (left <= 0) {
                    ::kill(-static_cast<pid_t>(pgid), SIGKILL);  // dlock missed its deadline
                    deadline = -1;
                    continue;
                }
                timeout = static_cast<int>(std::min<std::int64_t>(left / 1'000'000 + 1, 60'000));
            }
            pollfd p{in, POLLIN, 0};
            const int ready = ::poll(&p, 1, timeout);
            if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
            char message[watchdog_message_size];
            const ssize_t n = ::read(in, message, sizeof message);
            if (n < 0 && errno == EINTR) continue;
            if (n != static_cast<ssize_t>(sizeof message)) break;  // EOF: dlock is gone
            std::int64_t value = 0;
            std::memcpy(&value, message + 1, sizeof value);
            if (message[0] == 'G') pgid = value;
            if (message[0] == 'D') deadline = value;
            if (message[0] == 'Q') ::_exit(0);
        }
        if (pgid > 0) ::kill(-static_cast<pid_t>(pgid), SIGKILL);
        ::_exit(0);
    }
    const int fork_errno = errno;
    ::close(fds[0]);
    if (pid < 0) {
        ::close(fds[1]);
        throw cli_error(exit_status::os_error,
                        fmt::format("fork failed: {}", errno_text(fork_errno)));
    }
    pid_ = pid;
    fd_ = fds[1];
}

group_watchdog::~group_watchdog() { finish(); }

void group_watchdog::send(char kind, std::int64_t value) noexcept {
    if (fd_ < 0) return;
    char message[watchdog_message_size];
    message[0] = kind;
    std::memcpy(message + 1, &value, sizeof value);
    [[maybe_unused]] const auto w = ::write(fd_, message, sizeof message);  // atomic: < PIPE_BUF
}

void group_watchdog::watch(pid_t pgid) noexcept { send('G', pgid); }

void group_watchdog::arm(std::chrono::steady_clock::time_point deadline) noexcept {
    // steady_clock is CLOCK_MONOTONIC, a clock the watchdog process shares.
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
    send('D', std::max<std::int64_t>(ns, 0));
}

void group_watchdog::stand_down() noexcept {
    send('Q', 0);
    finish();
}

bool group_watchdog::died(pid_t& pid, int& raw_status) noexcept {
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, &raw_status, WNOHANG) != pid_) return false;
    pid = pid_;
    pid_ = -1;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return true;
}

void group_watchdog::finish() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (pid_ > 0) {
        int raw = 0;
        while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
    }
}

// --- the terminal -----------------------------------------------------------------------------

terminal_control::terminal_control() : fd_(::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)) {}

terminal_control::~terminal_control() {
    take_back();
    if (fd_ >= 0) ::close(fd_);
}

// SIGTTOU is blocked in dlock (run.cpp), so tcsetpgrp() from a background group is allowed.
void terminal_control::give(pid_t pgid) noexcept {
    if (fd_ < 0 || ::tcgetpgrp(fd_) != ::getpgrp()) return;
    if (::tcsetpgrp(fd_, pgid) == 0) given_to_ = pgid;
}

void terminal_control::take_back() noexcept {
    if (fd_ < 0 || given_to_ == 0) return;
    if (::tcgetpgrp(fd_) == given_to_) ::tcsetpgrp(fd_, ::getpgrp());
    given_to_ = 0;
}

bool group_alive(pid_t pgid) {
    if (::kill(-pgid, 0) != 0) return errno == EPERM;  // ESRCH: no member at all
    // kill() also counts zombies (members whose new parent has not reaped them yet).
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return true;
    bool alive = false;
    while (const dirent* entry = ::readdir(proc)) {
        if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
        char state = 0;
        long pgrp = 0;
        if (read_stat(entry->d_name, state, pgrp) && pgrp == pgid && state != 'Z' && state != 'X') {
            alive = true;
            break;
        }
    }
    ::closedir(proc);
    return alive;
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
