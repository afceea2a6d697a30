// Runs the real `dlock` binary (cli_binary()) as a process for the CLI tests, in a session of its
// own (no controlling terminal): its stdout and stderr go to temp files (read at any time, and
// no pipe can fill up and stall it), stdin is /dev/null, and the environment is the test's own
// minus DLOCK_URL, plus what a test adds.
// Optionally its stderr is a pseudo-terminal, to see what a person at a terminal sees.
// Use one object from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace dlock::test {

struct cli_result {
    int status = -1;  ///< exit code, or 128 + N when signal N killed it
    std::string out;  ///< everything written to stdout
    std::string err;  ///< everything written to stderr (or to the terminal, with tty_stderr)
};

struct cli_options {
    /// Added to the environment ("NAME=value"); replaces a variable of the same name.
    std::vector<std::string> env{};
    /// stderr is the slave side of a pseudo-terminal (isatty() is true), with TERM=xterm.
    bool tty_stderr = false;
};

class cli_process {
public:
    /// Starts `dlock args...`. Throws std::runtime_error if it cannot be started.
    explicit cli_process(std::vector<std::string> args, const cli_options& options = {});
    /// SIGKILL and reap if still running; removes the temp files. Never throws.
    ~cli_process();
    cli_process(const cli_process&) = delete;
    cli_process& operator=(const cli_process&) = delete;

    pid_t pid() const noexcept { return pid_; }
    void send(int sig) const;
    /// Still running (not yet exited)? Reaps it if it has exited.
    bool running();
    /// What it has written so far.
    std::string out() const;
    std::string err();

    /// Waits up to scaled(timeout) for it to exit. On timeout: SIGKILL, reap, throw
    /// std::runtime_error naming the command and quoting its stderr.
    cli_result wait(std::chrono::milliseconds timeout);

private:
    void drain_tty();  // moves what the pseudo-terminal holds into tty_text_

    std::vector<std::string> args_;
    temp_dir dir_;  // with out.txt and err.txt
    pid_t pid_ = -1;
    int status_ = -1;
    int tty_master_ = -1;
    std::string tty_text_;
};

/// The dlock binary the tests run: $DLOCK_TEST_CLI_BINARY if set (to run the tests against
/// another build, e.g. an older one), else the one built with them (DLOCK_CLI_PATH).
std::string cli_binary();

/// The value for `--connect-timeout` of a test's run against etcd: granting the session is a Raft
/// write (an fsync), which a loaded or sanitized CI machine took longer for than the default 2 s.
std::string etcd_connect_timeout();

/// The value for `--node-timeout` of a test's run against live Redlock servers: the default bound
/// per server and vote (the lease / 200, at most 50 ms, docs/redlock.md) is missed on a loaded
/// machine (a sanitized build beside other test binaries), where one slow answer fails the vote.
/// "No quorum" is not what those tests are about (Redlock's own tests cover it).
std::string vote_bound();

/// Runs `dlock args...` to completion (at most scaled(timeout)).
cli_result run_cli(std::vector<std::string> args, const cli_options& options = {},
                   std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// dlock's documented exit statuses (docs/cli.md, "Exit statuses"), named once for every CLI test.
namespace exit_status {
constexpr int ok = 0;
constexpr int demo_failed = 1;
constexpr int not_held = 3;  // dlock status
constexpr int usage = 64;
constexpr int unavailable = 69;
constexpr int unreachable = 74;
constexpr int conflict = 75;
constexpr int server_error = 76;
constexpr int auth_failed = 77;
constexpr int lock_lost = 79;
constexpr int max_hold = 124;
constexpr int not_found = 127;
}  // namespace exit_status

}  // namespace dlock::test
