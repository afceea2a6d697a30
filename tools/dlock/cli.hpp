// Shared pieces of the `dlock` command-line tool: its exit statuses, the error type every command
// throws for a user-facing failure, and the entry points of the commands (docs/cli.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <dlock/backend.hpp>

namespace dlock::cli {

/// dlock's own exit statuses, sysexits(3)-style. `dlock run` otherwise exits with the command's
/// status, or ends by the signal N that killed the command (a shell shows 128 + N). The table is
/// repeated in `dlock --help` (and so the manual page's EXIT STATUS) and docs/cli.md; keep the
/// three in step.
namespace exit_status {
inline constexpr int ok = 0;
inline constexpr int demo_failed = 1;    ///< demo: the locked run did not sell exactly the stock
inline constexpr int not_held = 3;       ///< status: the lock is not held (systemctl is-active)
inline constexpr int usage = 64;         ///< EX_USAGE: bad command line or option value
inline constexpr int unavailable = 69;   ///< EX_UNAVAILABLE: not in this build / not installed
inline constexpr int internal = 70;      ///< EX_SOFTWARE: a bug in dlock
inline constexpr int os_error = 71;      ///< EX_OSERR: fork, spawn, signalfd... failed
inline constexpr int unreachable = 74;   ///< EX_IOERR: lock server unreachable or silent
inline constexpr int conflict = 75;      ///< EX_TEMPFAIL: lock still held elsewhere at --wait
inline constexpr int server_error = 76;  ///< EX_PROTOCOL: error reply or not a Redis server
inline constexpr int auth_failed = 77;   ///< EX_NOPERM: credentials refused or missing
inline constexpr int lock_lost = 79;     ///< lock lost while the command ran; it was stopped
inline constexpr int max_hold = 124;  ///< --max-hold reached; the command was stopped (timeout(1))
inline constexpr int cannot_execute = 126;     ///< the command exists but could not be executed
inline constexpr int command_not_found = 127;  ///< the command was not found on PATH
}  // namespace exit_status

/// A failure to report as one line on stderr ("dlock: <what>") and exit with `status`. An empty
/// `what` means the message was already printed (or silenced by --quiet).
class cli_error : public std::runtime_error {
public:
    cli_error(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
    int status() const noexcept { return status_; }

private:
    int status_;
};

/// Options common to the commands that talk to a lock server.
struct server_options {
    std::string url{};         ///< already defaulted from $DLOCK_URL
    std::string key_prefix{};  ///< client_options::key_prefix
    std::optional<std::chrono::milliseconds> connect_timeout{};  ///< --connect-timeout
    std::optional<std::chrono::milliseconds> command_timeout{};  ///< --command-timeout
    std::optional<dlock::tls_options> tls{};  ///< --tls-ca, --tls-cert, --tls-key, --tls-insecure
    std::optional<std::chrono::milliseconds> node_timeout{};  ///< --node-timeout (redlock://)
};

struct run_options {
    server_options server{};
    std::string name{};
    dlock::lock_request request{};  ///< --fair, --shared, --permits N; default exclusive
    std::vector<std::string> command{};
    std::chrono::milliseconds lease{};
    std::chrono::milliseconds wait{};      ///< dlock::forever = wait until granted
    std::chrono::milliseconds max_hold{};  ///< dlock::forever = no cap
    std::chrono::milliseconds grace{};
    /// --wait was given (not 0): an unreachable server is tried again until it runs out.
    bool retry_unreachable = false;
    int conflict_exit_code = exit_status::conflict;
    bool foreground = false;
    bool quiet = false;
    bool verbose = false;
};

struct status_options {
    server_options server{};
    std::string name{};
    bool json = false;
    bool watch = false;  ///< stay and show each change until Ctrl-C
};

struct set_permits_options {
    server_options server{};
    std::string name{};
    std::uint32_t permits = 1;
};

struct demo_options {
    std::optional<std::string> url{};  ///< unset: start private redis-servers
    int workers = 4;
    int stock = 50;
    bool redlock = false;  ///< without url: start 3 servers and lock with Redlock
    std::optional<std::chrono::milliseconds> node_timeout{};  ///< --node-timeout (Redlock)
};

/// The hidden `__demo-worker` subcommand: one worker process of `dlock demo`.
struct demo_worker_options {
    std::string url{};
    std::string run_id{};
    std::string mode{};  ///< "unlocked" or "locked"
    int index = 0;
    std::optional<std::chrono::milliseconds> node_timeout{};  ///< the demo's --node-timeout
};

int run_command(const run_options& options);
int status_command(const status_options& options);
/// `dlock set-permits NAME N`: dlock::backend::set_permits; silent on success.
int set_permits_command(const set_permits_options& options);
int demo_command(const demo_options& options);
int demo_worker_command(const demo_worker_options& options);

}  // namespace dlock::cli
