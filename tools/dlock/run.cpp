// `dlock run NAME -- COMMAND...`: take the lock, run the command under it, release it however the
// command ends, and exit with the command's status (docs/cli.md).
//
// One thread does all the supervising: it sleeps in poll(2) on a signalfd (the signals to forward
// and SIGCHLD), an eventfd that fires when the lease is lost, and (while waiting for the lock) an
// eventfd that fires when the acquire running on a helper thread returns.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stop_token>
#include <thread>

#include "backend.hpp"
#include "cli.hpp"
#include "console.hpp"
#include "duration.hpp"
#include "process.hpp"

extern char** environ;  // NOLINT: POSIX global, copied into the command's environment

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// An eventfd used as a level-triggered flag between threads: raise() from any thread (it is
/// async-signal-safe, so a stop_callback may call it), poll the fd, reset() after seeing it.
class wake_flag {
public:
    wake_flag() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
        if (fd_ < 0) {
            throw cli_error(exit_status::os_error,
                            fmt::format("eventfd failed: {}", errno_text(errno)));
        }
    }
    ~wake_flag() { ::close(fd_); }
    wake_flag(const wake_flag&) = delete;
    wake_flag& operator=(const wake_flag&) = delete;

    void raise() const noexcept {
        const std::uint64_t one = 1;
        [[maybe_unused]] const auto n = ::write(fd_, &one, sizeof one);
    }
    void reset() const noexcept {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto n = ::read(fd_, &count, sizeof count);
    }
    int fd() const noexcept { return fd_; }

private:
    int fd_;
};

/// poll(2) on up to three fds (-1 = unused); returns which became readable.
struct ready_set {
    bool a = false, b = false, c = false;
};
ready_set wait_readable(int a, int b, int c, int timeout_ms) {
    pollfd fds[3] = {{a, POLLIN, 0}, {b, POLLIN, 0}, {c, POLLIN, 0}};
    const int n = ::poll(fds, 3, timeout_ms);  // negative fds are skipped by poll
    ready_set r;
    if (n > 0) {
        r.a = (fds[0].revents & POLLIN) != 0;
        r.b = (fds[1].revents & POLLIN) != 0;
        r.c = (fds[2].revents & POLLIN) != 0;
    }
    return r;
}

int ms_until(steady::time_point t) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(t - steady::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

bool is_forwarded(int sig) {
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT || sig == SIGUSR1 ||
           sig == SIGUSR2;
}

/// dlock's environment plus DLOCK_NAME and DLOCK_FENCING_TOKEN (replacing inherited ones).
std::vector<std::string> command_environment(const std::string& name, std::uint64_t token) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string_view entry(*e);
        if (entry.starts_with("DLOCK_NAME=") || entry.starts_with("DLOCK_FENCING_TOKEN=")) continue;
        env.emplace_back(entry);
    }
    env.push_back("DLOCK_NAME=" + name);
    env.push_back("DLOCK_FENCING_TOKEN=" + std::to_string(token));
    return env;
}

/// What the acquiring helper thread hands back, guarded by `mutex`.
struct acquisition {
    std::mutex mutex;  // guards everything below
    bool done = false;
    dlock::lease lease;
    std::optional<dlock::error> error;
    std::string other_failure;  // an exception that is not a dlock::error (e.g. bad_alloc)
};

class runner {
public:
    explicit runner(const run_options& options)
        : o_(options),
          console_(options.quiet, options.verbose),
          started_(steady::now()),
          service_(o_.server.url, o_.server.key_prefix,
                   {.observer = [this](const dlock::lock_event& e) { on_event(e); },
                    .error_handler =
                        [this](std::error_code, std::string_view what) {
                            console_.error(fmt::format("warning: {}", what));
                        }}) {}

    int run() {
        dlock::lease lease = acquire();
        if (lease.state() == dlock::lock_state::lost) {
            // The grant's reply came back after its own lease had passed (a very slow server).
            throw cli_error(exit_status::lock_lost,
                            fmt::format("lost the lock \"{}\" before the command started "
                                        "(the server answered too slowly for --lease {})",
                                        o_.name, format_duration(o_.lease)));
        }
        return supervise(lease);
    }

private:
    void on_event(const dlock::lock_event& e) {
        if (e.kind == dlock::event_kind::wait_started) {
            waiting_.store(true);
            wait_started_.raise();
        }
        if (!console_.verbose_enabled()) return;
        const auto at = std::chrono::duration<double>(e.at - started_).count();
        std::string what;
        switch (e.kind) {
            case dlock::event_kind::wait_started:
                what = fmt::format("\"{}\" is held by someone else; waiting", e.name);
                break;
            case dlock::event_kind::acquired:
                what = fmt::format("acquired \"{}\" (fencing token {})", e.name, e.fencing_token);
                break;
            case dlock::event_kind::renewed: what = fmt::format("renewed \"{}\"", e.name); break;
            case dlock::event_kind::released: what = fmt::format("released \"{}\"", e.name); break;
            case dlock::event_kind::lost:
                what = fmt::format("lost \"{}\": {}", e.name, e.error.message());
                break;
            case dlock::event_kind::error:
                what = fmt::format("error on \"{}\": {}", e.name, e.error.message());
                break;
        }
        console_.verbose(fmt::format("[{:7.3f}s] {}", at, what));
    }

    /// Takes the lock on a helper thread while this one shows progress and watches for signals.
    /// A signal cancels the wait (lock_options::cancel) and ends the process (give_up()).
    dlock::lease acquire() {
        std::stop_source cancel;
        const dlock::lock_options lock{.lease = o_.lease,
                                       .wait = o_.wait,
                                       .max_hold = o_.max_hold,
                                       .cancel = cancel.get_token()};
        acquisition result;
        wake_flag done;
        std::jthread helper([&] {
            dlock::lease lease;
            std::optional<dlock::error> error;
            std::string other;
            try {
                lease = service_.backend().acquire(o_.name, o_.request, lock);
            } catch (const dlock::error& e) {
                error = e;
            } catch (const std::exception& e) {
                other = e.what();
            }
            std::lock_guard guard(result.mutex);
            result.lease = std::move(lease);
            result.error = std::move(error);
            result.other_failure = std::move(other);
            result.done = true;
            done.raise();
        });

        std::optional<std::int64_t> holder_pttl;  // the holder's PTTL at holder_pttl_at
        steady::time_point holder_pttl_at{};
        auto next_pttl = steady::now();
        for (;;) {
            const bool show = console_.status_enabled() && waiting_.load();
            // The 200 ms tick only redraws the status line; the lock itself is awaited through
            // the client's release notifications on the helper thread.
            const auto r =
                wait_readable(signals_.fd(), done.fd(), wait_started_.fd(), show ? 200 : -1);
            if (r.c) wait_started_.reset();
            if (r.b) break;
            if (r.a) {
                while (const auto info = signals_.next()) {
                    const int sig = static_cast<int>(info->ssi_signo);
                    if (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCHLD)
                        continue;  // no command yet
                    give_up(sig, result, helper, cancel);
                }
            }
            if (!console_.status_enabled() || !waiting_.load()) continue;
            const auto now = steady::now();
            if (now >= next_pttl) {
                holder_pttl = holder_lease_left();
                holder_pttl_at = now;
                next_pttl = steady::now() + 1s;
            }
            const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - started_);
            std::string line = fmt::format(
                "dlock: waiting for \"{}\" {}", o_.name,
                waited < 1min ? fmt::format("{}s", waited.count()) : format_duration(waited));
            if (holder_pttl && *holder_pttl >= 0) {
                const auto left =
                    std::chrono::milliseconds(*holder_pttl) -
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - holder_pttl_at);
                line +=
                    fmt::format("; holder's lease {} left", format_duration(std::max(left, 0ms)));
            } else if (holder_pttl && *holder_pttl == -1) {
                line += "; held with no expiry";
            }
            if (o_.wait != dlock::forever) {
                const auto left =
                    o_.wait - std::chrono::duration_cast<std::chrono::milliseconds>(now - started_);
                line += fmt::format("; giving up in {}", format_duration(std::max(left, 0ms)));
            } else {
                line += "; Ctrl-C to give up";
            }
            console_.set_status(line);
        }
        helper.join();
        console_.clear_status();

        std::lock_guard guard(result.mutex);
        if (result.lease) return std::move(result.lease);
        if (result.error) {
            if (dlock::is_contention(result.error->code())) {
                // Not an error but an expected outcome (flock -E): --quiet silences it.
                console_.note(fmt::format(
                    "lock \"{}\" is held by someone else ({})", o_.name,
                    o_.wait <= 0ms ? std::string("--no-wait")
                                   : "gave up after --wait " + format_duration(o_.wait)));
                throw cli_error(o_.conflict_exit_code, "");
            }
            throw to_cli_error(*result.error, o_.server.url);
        }
        throw cli_error(exit_status::internal,
                        fmt::format("acquire failed: {}", result.other_failure));
    }

    /// For the status line only: the holder's remaining lease (PTTL of the lock key; -1: a key
    /// without expiry), or nullopt if unknown. With Redlock, the lease left on a quorum of servers.
    std::optional<std::int64_t> holder_lease_left() {
        std::vector<std::int64_t> pttls;
        for (dlock::redis::client* server : service_.servers()) {
            std::error_code ec;
            const auto reply = server->command({"PTTL", server->lock_key(o_.name)}, ec);
            if (!ec && reply.type == dlock::redis::reply::kind::integer && reply.integer != -2) {
                pttls.push_back(reply.integer);
            }
        }
        const std::size_t quorum = service_.quorum();
        if (pttls.size() < quorum) return std::nullopt;
        std::sort(pttls.begin(), pttls.end(), std::greater<>());
        return pttls[quorum - 1];
    }

    /// A signal arrived while waiting for the lock: cancel the wait, hand back a grant that won
    /// the race, and end as that signal would.
    [[noreturn]] void give_up(int sig, acquisition& result, std::jthread& helper,
                              std::stop_source& cancel) {
        console_.clear_status();
        cancel.request_stop();
        helper.join();  // prompt: the wait ends at once; an attempt in flight finishes first
        std::unique_lock guard(result.mutex);
        if (result.lease) {
            std::error_code ec;
            result.lease.release(ec);
        }
        console_.note(
            fmt::format("{} while waiting for \"{}\"; gave up", signal_name(sig), o_.name));
        die_by_signal(sig);
    }

    int supervise(dlock::lease& lease) {
        const auto acquired_at = steady::now();
        int spawn_error = 0;
        const pid_t child =
            spawn_process(o_.command,
                          {.new_process_group = !o_.foreground,
                           .environment = command_environment(o_.name, lease.fencing_token())},
                          spawn_error);
        if (child < 0) {
            if (spawn_error == ENOENT) {
                throw cli_error(exit_status::command_not_found,
                                fmt::format("{}: command not found", o_.command.front()));
            }
            throw cli_error(exit_status::cannot_execute,
                            fmt::format("{}: {}", o_.command.front(), errno_text(spawn_error)));
        }
        // The command's whole process group, so that what it started stops with it (timeout(1));
        // with --foreground it shares dlock's group, so only the command itself.
        const pid_t target = o_.foreground ? child : -child;

        wake_flag lost_flag;
        std::optional<std::stop_callback<std::function<void()>>> on_lost;
        on_lost.emplace(lease.lost_token(),
                        std::function<void()>([&lost_flag] { lost_flag.raise(); }));

        bool lost = false;
        std::optional<steady::time_point> kill_at;
        int command_status = -1;
        while (command_status < 0) {
            const auto r =
                wait_readable(signals_.fd(), lost_flag.fd(), -1, kill_at ? ms_until(*kill_at) : -1);
            if (r.a) {
                while (const auto info = signals_.next()) {
                    const int sig = static_cast<int>(info->ssi_signo);
                    if (sig == SIGCHLD) {
                        int raw = 0;
                        if (::waitpid(child, &raw, WNOHANG) == child) {
                            command_status = decode_wait_status(raw);
                            // Checked at once: a loss after the command ended does not count.
                            if (!lost && lease.state() == dlock::lock_state::lost) lost = true;
                        }
                        continue;
                    }
                    if (!is_forwarded(sig)) continue;
                    // With --foreground the command shares the terminal's process group, so a
                    // signal from the terminal (SI_KERNEL) has already reached it.
                    if (o_.foreground && info->ssi_code == SI_KERNEL) continue;
                    ::kill(target, sig);
                    console_.verbose(fmt::format("forwarded {} to the command", signal_name(sig)));
                }
            }
            if (command_status >= 0) break;
            if (r.b) lost_flag.reset();
            if (r.b && !lost && lease.state() == dlock::lock_state::lost) {
                lost = true;
                const auto held = steady::now() - acquired_at;
                // The client gives a grant up a drift margin (lease/100 + 2 ms) before its end.
                const bool max_hold_reached = o_.max_hold != dlock::forever &&
                                              held >= o_.max_hold - o_.lease / 100 - 2ms - 100ms;
                console_.error(fmt::format(
                    "{}; stopping the command (SIGTERM now, SIGKILL in {})",
                    max_hold_reached ? fmt::format("held the lock \"{}\" for --max-hold {}",
                                                   o_.name, format_duration(o_.max_hold))
                                     : fmt::format("lost the lock \"{}\"", o_.name),
                    format_duration(o_.grace)));
                ::kill(target, SIGTERM);
                ::kill(target, SIGCONT);  // a stopped command could not act on SIGTERM
                kill_at = steady::now() + o_.grace;
            }
            if (kill_at && steady::now() >= *kill_at) {
                ::kill(target, SIGKILL);
                console_.error(
                    fmt::format("the command did not stop within --grace {}; sent SIGKILL",
                                format_duration(o_.grace)));
                kill_at.reset();
            }
        }
        on_lost.reset();

        std::error_code ec;
        lease.release(ec);
        if (ec == dlock::errc::lock_lost && !lost) {
            lost = true;  // expired or taken over while the command ran, before we noticed
        } else if (ec && ec != dlock::errc::lock_lost) {
            console_.error(
                fmt::format("warning: could not release \"{}\" ({}); it expires within --lease {}",
                            o_.name, ec.message(), format_duration(o_.lease)));
        }
        if (lost) {
            console_.error(
                fmt::format("the lock \"{}\" was lost while the command ran (the "
                            "command's own status: {}); exiting with {}",
                            o_.name, command_status, exit_status::lock_lost));
            return exit_status::lock_lost;
        }
        return command_status;
    }

    const run_options& o_;
    console console_;
    signal_watch signals_;  // before service_: its client threads must inherit the blocked mask
    wake_flag wait_started_;
    std::atomic<bool> waiting_{false};
    const steady::time_point started_;
    lock_service service_;
};

}  // namespace

int run_command(const run_options& options) {
    runner r(options);
    return r.run();
}

}  // namespace dlock::cli
