// Internal to dlock_test_support: fork + exec shared by redis_server and child_process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dlock::test::detail {

/// fork + execv(path, argv). In the child: PR_SET_PDEATHSIG=SIGKILL when called from the main
/// thread (Linux delivers it when the *forking thread* exits, so from another thread it would
/// kill the child as soon as that thread ends), empty signal mask, stdin from /dev/null, stdout
/// and stderr to `out_fd` (or inherited if -1), every other descriptor closed (so the child does
/// not keep the test's sockets open). An exec failure makes the child exit 127.
/// Throws std::runtime_error if fork fails.
pid_t spawn(const std::string& path, const std::vector<std::string>& argv, int out_fd);

/// waitpid(pid, 0) retried on EINTR; returns the raw status (or -1).
int wait_blocking(pid_t pid);

/// waitpid(pid, WNOHANG) until it exits or `timeout` passes (sleeping 1-10 ms); returns true and
/// sets `raw_status` if it exited.
bool wait_for(pid_t pid, std::chrono::milliseconds timeout, int& raw_status);

/// Stops a server process: SIGTERM plus SIGCONT (a paused process handles SIGTERM only once it
/// runs again), then SIGKILL if it has not exited after `grace`; reaps it and sets `pid` to -1.
/// No-op when `pid` <= 0.
void terminate(pid_t& pid, std::chrono::milliseconds grace);

/// SIGKILL, reap, and set `pid` to -1. No-op when `pid` <= 0.
void kill_now(pid_t& pid);

/// exit code, or 128 + signal for a killed process.
int decode_status(int raw_status);

}  // namespace dlock::test::detail
