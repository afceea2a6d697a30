// Processes and signals for the `dlock` tool: a signalfd that turns the signals dlock handles into
// readable events, what dlock inherited (ignored signals, descriptors), the supervision pieces of
// `dlock run` (its command's process, the watchdog that kills the command's group if dlock dies,
// the terminal's foreground), posix_spawn of worker processes, exit-status decoding, and the
// private redis-server that `dlock demo` starts when it is given no --url.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
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

/// Records what dlock inherited from whoever started it, for its command to inherit the same:
/// which signals were ignored (nohup(1), `&` in a non-interactive shell, `trap '' INT`) and which
/// descriptors above 2 were open. Call it first thing in main(), before anything is opened or any
/// disposition changed. Also resets an inherited ignored SIGCHLD (dlock must be able to wait).
/// `argc`/`argv` are main()'s: the watchdog renames itself in that memory (group_watchdog).
void record_inherited(int argc, char** argv);
/// Whether `sig` was ignored when dlock started (record_inherited()).
bool inherited_ignored(int sig);

/// Blocks handled_signals in the calling thread and reads them from a signalfd. Create it in
/// main() before any thread starts (the dlock client's background thread inherits the mask),
/// so every such signal sent to the process is queued here instead of running its default action.
class signal_watch {
public:
    signal_watch();  ///< handled_signals; throws cli_error(os_error) if signalfd fails
    /// `signals` instead; `also_block` are blocked in the calling thread (and the threads it
    /// starts) without being read.
    signal_watch(const std::vector<int>& signals, const std::vector<int>& also_block);
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
/// expects of a program interrupted by that signal (a shell loop stops on SIGINT). No core file
/// is written for it: the core would be dlock's, not the command's. Falls back to _Exit(128 + sig).
[[noreturn]] void die_by_signal(int sig);

/// Stops the whole dlock process (SIGSTOP, which no process group state can discard) and returns
/// once it is continued.
void stop_self() noexcept;

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

/// The command of `dlock run`, forked into a process group of its own (its pid is the group id)
/// and held before exec until go(): so that the watchdog and the terminal are set up for its
/// group before any of its code runs. Between fork and exec the child: becomes group leader,
/// asks for SIGKILL when dlock dies (PR_SET_PDEATHSIG, re-checking that dlock is still its
/// parent), gets the signal dispositions dlock inherited (ignored ones stay ignored, the rest
/// default) and an empty signal mask, and closes every descriptor above 2 except those dlock
/// inherited (record_inherited()), so none of dlock's own (lock server connections, pipes) leak.
/// The child waits on a pipe: if dlock dies before go(), it exits without running anything.
class command_child {
public:
    /// Looks the command up on PATH (like a shell) and forks. On failure pid() is -1 and error()
    /// the errno (ENOENT: not found; EACCES: not executable). Throws cli_error(os_error) if
    /// pipe or fork fails.
    command_child(const std::vector<std::string>& argv, const std::vector<std::string>& env);
    ~command_child();  ///< closes the pipes (a child still held then exits with 127)
    command_child(const command_child&) = delete;
    command_child& operator=(const command_child&) = delete;

    pid_t pid() const noexcept { return pid_; }
    int error() const noexcept { return error_; }
    /// Lets the child exec. Returns 0 once it has, or the errno of a failed exec (the child then
    /// exits with 127 and must still be reaped).
    int go();

private:
    pid_t pid_ = -1;
    int error_ = 0;
    int go_fd_ = -1;   // write end: one byte releases the child
    int err_fd_ = -1;  // read end: EOF on exec, or the errno of a failed exec
};

/// A helper process, "dlock-watchdog" in ps(1), that kills the command's whole process group
/// (SIGKILL) when dlock can no longer be trusted to: a dead-man's switch. It sits in a session of
/// its own holding the read end of a pipe whose write end only dlock holds, and kills the group
///  - when it reads end-of-file: dlock is gone, by whatever means (SIGKILL, the OOM killer, a
///    crash);
///  - when the deadline dlock last sent passes without a new one: dlock is alive but stopped
///    (SIGSTOP, a debugger), or starved. dlock sends deadlines a margin before its lease can
///    end (run.cpp), so the group is dead before another holder can get the lock.
/// Start it before any thread (it forks). PR_SET_PDEATHSIG alone would reach only the command
/// itself, not what the command started. Deadlines are CLOCK_MONOTONIC (steady_clock) times.
class group_watchdog {
public:
    group_watchdog();   ///< throws cli_error(os_error) if pipe or fork fails
    ~group_watchdog();  ///< without stand_down(): the watchdog kills the group it watches
    group_watchdog(const group_watchdog&) = delete;
    group_watchdog& operator=(const group_watchdog&) = delete;

    /// From now on, dlock's death means SIGKILL to process group `pgid`.
    void watch(pid_t pgid) noexcept;
    /// Unless another deadline arrives first, SIGKILL to the group at `deadline` (once).
    void arm(std::chrono::steady_clock::time_point deadline) noexcept;
    /// The group is gone: the watchdog exits without killing anything; reaps it.
    void stand_down() noexcept;
    /// Whether the watchdog has died (killed by someone: it never exits on its own before
    /// stand_down()); reaps it. Its pid is in `pid` and how it ended in `raw_status`.
    bool died(pid_t& pid, int& raw_status) noexcept;

private:
    void send(char kind, std::int64_t value) noexcept;
    void finish() noexcept;  // close the pipe and reap the helper

    pid_t pid_ = -1;
    int fd_ = -1;
};

/// dlock's controlling terminal, if it has one: hands the foreground to the command's process
/// group while dlock itself is in the foreground (as shells do for a job), so that the command
/// can read the terminal and gets Ctrl-C / Ctrl-Z from it, and takes it back afterwards.
class terminal_control {
public:
    terminal_control();   ///< opens /dev/tty; without a controlling terminal everything is a no-op
    ~terminal_control();  ///< take_back()
    terminal_control(const terminal_control&) = delete;
    terminal_control& operator=(const terminal_control&) = delete;

    /// Makes `pgid` the terminal's foreground process group if dlock's group is it now.
    void give(pid_t pgid) noexcept;
    /// Gives the foreground back to dlock's group if `give()` handed it out and it is still there.
    void take_back() noexcept;
    /// Whether give() handed the terminal out (and take_back() has not been called since).
    bool given() const noexcept { return given_to_ != 0; }

private:
    int fd_ = -1;
    pid_t given_to_ = 0;
};

/// Whether process group `pgid` still has a member that is not a zombie.
bool group_alive(pid_t pgid);

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
