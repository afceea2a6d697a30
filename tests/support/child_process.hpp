// Multi-process tests: the test binary re-executes itself with "--dlock-child=<role>" and
// dlock_test_main runs the registered role instead of gtest (fork without exec is unsafe once
// threads exist, and under TSan). Roles get their parameters (server URL, key, ...) as args.
//
//   static const bool registered = dlock::test::register_child("counter", [](const auto& args) {
//       ...; return 0;   // the exit code
//   });
//   dlock::test::child_process c("counter", {redis.url(), key});
//   EXPECT_EQ(c.wait(10s), 0);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dlock::test {

using child_fn = std::function<int(const std::vector<std::string>& args)>;

/// Registers role `name` (call from a static initializer). Returns true; registering a name twice
/// aborts with a message, because which one would run is otherwise unclear. A role runs without
/// gtest initialised and reports only through its exit code (EXPECT_* inside it change nothing).
bool register_child(std::string name, child_fn fn);

/// Used by dlock_test_main: runs `role` with `args` and returns its exit code; 99 for an unknown
/// role, 98 if the role throws (the exception is printed to stderr).
int run_child_role(const std::string& role, const std::vector<std::string>& args);

/// One child process running a role. Use from one thread at a time.
class child_process {
public:
    /// fork + execv("/proc/self/exe", {argv0, "--dlock-child=<role>", args...}). stdin is
    /// /dev/null, stdout/stderr are inherited, all other descriptors are closed in the child.
    /// The child gets PR_SET_PDEATHSIG=SIGKILL when started from the main thread (Linux ties it
    /// to the forking thread). Throws std::runtime_error if fork fails; an exec failure shows as
    /// exit status 127.
    child_process(std::string role, std::vector<std::string> args);
    /// SIGKILL + waitpid if still running. Never throws.
    ~child_process();
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;

    /// The child's pid, or -1 once it has been reaped by wait().
    pid_t pid() const;
    /// Sends SIGKILL (does not reap: call wait(), which then returns 128 + 9).
    void kill9();
    /// Sends `sig` (SIGSTOP, SIGCONT, SIGTERM...). No-op once reaped.
    void stop_signal(int sig);
    /// Waits up to scaled(timeout) for the child to exit (waitpid WNOHANG every 2-10 ms) and
    /// returns its status: the exit code, or 128 + signal number if it was killed. Later calls
    /// return the same status. On timeout, kills and reaps the child, then throws
    /// std::runtime_error.
    int wait(std::chrono::milliseconds timeout);

private:
    std::string role_;
    pid_t pid_ = -1;
    int status_ = -1;  // decoded exit status once reaped
};

}  // namespace dlock::test
