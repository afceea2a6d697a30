// Processes and signals for the `dlock` tool: a signalfd that turns the signals dlock handles into
// readable events, posix_spawn of commands and worker processes, exit-status decoding, and the
// private redis-server that `dlock demo` starts when it is given no --url.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace dlock::cli {

/// The value of environment variable `name`, or "" if unset. dlock never sets variables, so
/// reading them from any thread is safe.
std::string env_value(const char* name);

/// strerror(3) text for an errno value (thread-safe).
std::string errno_text(int error);

/// Every signal dlock handles through a signal_watch: the ones `dlock run` forwards to its
/// command, plus SIGCHLD. Children get them back with default dispositions and unblocked.
inline constexpr int handled_signals[] = {SIGINT,  SIGTERM, SIGHUP, SIGQUIT,
                                          SIGUSR1, SIGUSR2, SIGCHLD};

/// Blocks handled_signals in the calling thread and reads them from a signalfd. Create it in
/// main() before any thread starts (the dlock client's background thread inherits the mask),
/// so every such signal sent to the process is queued here instead of running its default action.
class signal_watch {
public:
    signal_watch();   ///< throws cli_error(os_error) if signalfd fails
    ~signal_watch();  ///< closes the fd; the signals stay blocked (dlock is about to exit)
    signal_watch(const signal_watch&) = delete;
    signal_watch& operator=(const signal_watch&) = delete;

    int fd() const noexcept { return fd_; }
    /// The next pending signal, or nullopt when none is pending (never blocks).
    std::optional<signalfd_siginfo> next();

private:
    int fd_ = -1;
};

/// Restores `sig`'s default action, unblocks it and raises it, so dlock ends the way a shell
/// expects of a program interrupted by that signal. Falls back to _Exit(128 + sig).
[[noreturn]] void die_by_signal(int sig);

/// "SIGTERM" for SIGTERM, "signal 42" for one without a name.
std::string signal_name(int sig);

struct spawn_options {
    /// Start the process in a new process group of its own (its pid becomes the group id).
    bool new_process_group = false;
    /// Join this existing process group instead (0: stay in dlock's group).
    pid_t process_group = 0;
    /// The child's complete environment ("NAME=value"); nullopt: dlock's own.
    std::optional<std::vector<std::string>> environment{};
};

/// posix_spawnp(argv[0], argv): PATH lookup like a shell, signal mask emptied and the signals
/// dlock handles reset to their defaults (SIGPIPE too). posix_spawn, not fork(), because the
/// dlock client already runs a background thread. Returns the pid, or -1 with `error` set to the
/// errno (ENOENT: not found, EACCES: not executable, ...).
pid_t spawn_process(const std::vector<std::string>& argv, const spawn_options& options, int& error);

/// The exit status a shell would report for a raw waitpid() status: the exit code, or 128 + N
/// when signal N killed it.
int decode_wait_status(int raw_status);

/// A private redis-server for `dlock demo`: started on a free 127.0.0.1 port in a fresh temp dir,
/// saving nothing; stopped (SIGTERM, then SIGKILL) and its dir removed by the destructor. It is
/// killed too if dlock itself is killed (PR_SET_PDEATHSIG), and runs in its own process group so
/// a Ctrl-C on the terminal reaches dlock, which then shuts it down in order.
class embedded_redis {
public:
    /// Finds redis-server ($DLOCK_REDIS_SERVER, else PATH; cli_error(unavailable) if missing) and
    /// waits up to 10 s for it to answer. Call it before any thread is started: it forks.
    embedded_redis();
    ~embedded_redis();
    embedded_redis(const embedded_redis&) = delete;
    embedded_redis& operator=(const embedded_redis&) = delete;

    std::string url() const;
    const std::string& version() const noexcept { return version_; }

private:
    bool start_on(unsigned short port, std::string& why);  // true once it answers
    void stop_server() noexcept;  // SIGTERM, then SIGKILL after 5 s; reaps it
    void remove() noexcept;       // stop_server() and remove the temp dir

    std::string binary_;
    std::string dir_;
    std::string version_;
    unsigned short port_ = 0;
    pid_t pid_ = -1;
};

}  // namespace dlock::cli
