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
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stop_token>
#include <utility>
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

/// "killed by SIGKILL" or "exit status 3" for a raw waitpid() status.
std::string describe_wait_status(int raw) {
    if (WIFSIGNALED(raw)) return "killed by " + signal_name(WTERMSIG(raw));
    return fmt::format("exit status {}", WEXITSTATUS(raw));
}

/// The pause before acquire attempt `attempt` + 1 after an unreachable server: 100 ms doubling up
/// to 2 s, each drawn uniformly from its upper half (jitter, so that many waiting dlocks do not
/// come back in step after an outage).
steady::duration retry_delay(int attempt) {
    const auto ceiling =
        std::min<std::chrono::milliseconds>(100ms * (1LL << std::min(attempt - 1, 5)), 2s);
    std::uint32_t random = 0;
    if (::getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) random = 0;
    const auto half = ceiling / 2;
    return half + std::chrono::milliseconds(random % (half.count() + 1));
}

int ms_until(steady::time_point t) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(t - steady::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

/// The signals dlock reads while it runs: those it passes on to the command (unless dlock was
/// started with them ignored: then they stay ignored, for dlock and the command), SIGTSTP (passed
/// on; dlock stops when the command does), SIGCONT (dlock was continued) and SIGCHLD.
std::vector<int> watched_signals() {
    std::vector<int> out = {SIGCHLD, SIGCONT};
    for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP}) {
        if (!inherited_ignored(sig)) out.push_back(sig);
    }
    return out;
}
/// Blocked and never read: tcsetpgrp() from a background group, and writes to the terminal with
/// `stty tostop` while the command has it, must not stop dlock.
const std::vector<int> quiet_signals = {SIGTTOU, SIGTTIN};

/// dlock's environment plus DLOCK_NAME and DLOCK_FENCING_TOKEN (replacing inherited ones),
/// without credentials: DLOCK_PASSWORD, and DLOCK_URL when it carries a password. On etcd also
/// ETCD_LOCK_KEY and ETCD_LOCK_REV, as `etcdctl lock NAME -- command` sets them (the key and its
/// create revision, which is the fencing token).
std::vector<std::string> command_environment(const std::string& name, const dlock::lease& lease,
                                             const std::string& etcd_key) {
    const bool etcd = !etcd_key.empty();
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string_view entry(*e);
        if (entry.starts_with("DLOCK_NAME=") || entry.starts_with("DLOCK_FENCING_TOKEN=") ||
            entry.starts_with("DLOCK_PASSWORD=")) {
            continue;
        }
        if (etcd && (entry.starts_with("ETCD_LOCK_KEY=") || entry.starts_with("ETCD_LOCK_REV=")))
            continue;
        if (entry.starts_with("DLOCK_URL=") && has_password(entry.substr(10))) continue;
        env.emplace_back(entry);
    }
    env.push_back("DLOCK_NAME=" + name);
    env.push_back("DLOCK_FENCING_TOKEN=" + std::to_string(lease.fencing_token()));
    if (etcd) {
        env.push_back("ETCD_LOCK_KEY=" + etcd_key);
        env.push_back("ETCD_LOCK_REV=" + std::to_string(lease.fencing_token()));
    }
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
          signals_(watched_signals(), quiet_signals),
          started_(steady::now()),
          service_(o_.server, {.observer = [this](const dlock::lock_event& e) { on_event(e); },
                               .error_handler =
                                   [this](std::error_code, std::string_view what) {
                                       console_.warning(fmt::format("warning: {}", what));
                                   }}) {}

    int run() {
        dlock::lease lease = acquire();
        holding_.store(true);
        warn_degraded();  // a server that failed the acquire's vote
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
    /// A degraded Redlock still grants on its quorum: said once per run, once the lock is held
    /// (a failed acquire says what failed in its own message) (docs/cli.md).
    void warn_degraded() {
        std::string first;
        {
            std::lock_guard lock(degraded_mutex_);
            if (degraded_.empty() || degraded_warned_) return;
            degraded_warned_ = true;
            first = degraded_;
        }
        const auto quorum = fmt::format("the lock holds while a quorum ({} of {}) answers",
                                        service_.quorum(), service_.server_urls().size());
        console_.error(console_.verbose_enabled()
                           ? fmt::format("warning: Redlock is degraded: {}; {}", first, quorum)
                           : fmt::format("warning: Redlock is degraded: a server failed a vote; "
                                         "{} (-v names it)",
                                         quorum));
    }

    void on_event(const dlock::lock_event& e) {
        if (e.kind == dlock::event_kind::wait_started) {
            waiting_.store(true);
            wait_started_.raise();
        }
        if (e.kind == dlock::event_kind::renewed) renewed_.raise();  // a later watchdog deadline
        if (e.kind == dlock::event_kind::node_failed) {
            {
                std::lock_guard lock(degraded_mutex_);
                if (degraded_.empty()) {
                    degraded_ = fmt::format("server {} failed a vote on \"{}\" ({})", e.server,
                                            e.name, e.detail);
                }
            }
            if (holding_.load()) warn_degraded();
            return;
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
                what = fmt::format("lost \"{}\" ({}): {}", e.name, dlock::to_string(e.reason),
                                   e.error.message());
                break;
            case dlock::event_kind::gave_up:
                what = fmt::format("gave up on \"{}\": {}", e.name, e.error.message());
                break;
            case dlock::event_kind::renewal_failed:
                what = fmt::format("renewal of \"{}\" not confirmed; retrying", e.name);
                break;
            case dlock::event_kind::error:
                what = fmt::format("error on \"{}\": {}", e.name, e.error.message());
                break;
            case dlock::event_kind::node_failed: return;  // the warning above
        }
        console_.verbose(fmt::format("[{:7.3f}s] {}", at, what));
    }

    /// Takes the lock on a helper thread while this one shows progress and watches for signals.
    /// A signal cancels the wait (lock_options::cancel) and ends the process (give_up()).
    dlock::lease acquire() {
        std::stop_source cancel;
        // The lease is capped a margin after --max-hold: supervise() stops the command that
        // margin before the lease ends, i.e. at --max-hold itself.
        const dlock::lock_options lock{.lease = o_.lease,
                                       .wait = o_.wait,
                                       .max_hold = o_.max_hold == dlock::forever
                                                       ? dlock::forever
                                                       : o_.max_hold + deadline_margin(o_.lease),
                                       .cancel = cancel.get_token()};
        acquisition result;
        wake_flag done;
        std::jthread helper([&] {
            dlock::lease lease;
            std::optional<dlock::error> error;
            std::string other;
            // With --wait, a server that cannot be reached is tried again (exponential back-off
            // with jitter) until --wait runs out; each attempt waits for the rest of it.
            const auto deadline =
                o_.wait == dlock::forever ? steady::time_point::max() : started_ + o_.wait;
            for (int attempt = 1;; ++attempt) {
                dlock::lock_options options = lock;
                if (o_.wait != dlock::forever) {
                    options.wait = std::max(
                        std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now()),
                        0ms);
                }
                try {
                    lease = service_.backend().acquire(o_.name, o_.request, options);
                    error.reset();
                } catch (const dlock::error& e) {
                    error = e;
                } catch (const std::exception& e) {
                    other = e.what();
                }
                if (!error || !o_.retry_unreachable ||
                    status_for(error->code()) != exit_status::unreachable) {
                    break;
                }
                const auto now = steady::now();
                if (now >= deadline || cancel.get_token().stop_requested()) break;
                unreachable_attempts_ = attempt;
                if (attempt == 1) {
                    console_.clear_status();
                    console_.error(fmt::format("warning: {}; trying again until --wait {} runs out",
                                               to_cli_error(*error, o_.server.url).what(),
                                               format_duration(o_.wait)));
                }
                const auto pause = std::min<steady::duration>(retry_delay(attempt), deadline - now);
                std::mutex m;
                std::condition_variable_any cv;
                std::unique_lock lk(m);
                cv.wait_for(lk, cancel.get_token(), pause, [] { return false; });
                if (cancel.get_token().stop_requested()) break;
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
                    if (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCHLD || sig == SIGCONT)
                        continue;  // no command yet
                    if (sig == SIGTSTP) {
                        // Ctrl-Z while waiting: nothing runs under the lock yet, so just stop. A
                        // grant that expires meanwhile is found lost before the command starts.
                        console_.clear_status();
                        stop_self();
                        continue;
                    }
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
            auto failure = to_cli_error(*result.error, o_.server.url);
            if (unreachable_attempts_ > 0 && failure.status() == exit_status::unreachable) {
                // Not "held by someone else" (75): the server was not reachable until the end.
                throw cli_error(failure.status(),
                                fmt::format("{} (tried {} times within --wait {})", failure.what(),
                                            unreachable_attempts_ + 1, format_duration(o_.wait)));
            }
            throw failure;
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

    /// How long before its lease can end dlock stops a command it cannot renew the lock for (a
    /// fifth of the validity, at most 2 s). The watchdog's deadline lies half of it before the
    /// end: it kills the group if dlock misses that point (stopped, starved).
    static std::chrono::milliseconds deadline_margin(std::chrono::milliseconds validity) {
        return std::clamp<std::chrono::milliseconds>(validity / 5, 1ms, 2s);
    }

    /// Runs the command in a process group of its own and supervises that group until it is
    /// empty: forwards signals, follows it when the terminal stops it (Ctrl-Z), stops it when the
    /// lock is lost or is about to end unrenewed, keeps the watchdog's deadline ahead, and returns
    /// dlock's exit status (or ends by the signal that killed the command).
    int supervise(dlock::lease& lease) {
        const auto acquired_at = steady::now();
        // The validity actually granted (a ZooKeeper session may be shorter than --lease).
        const auto margin =
            std::min(deadline_margin(o_.lease), deadline_margin(lease.expires_in()));
        {
            pid_t pid = 0;
            int raw = 0;
            if (watchdog_.died(pid, raw)) {
                std::error_code ec;
                lease.release(ec);
                throw cli_error(exit_status::os_error,
                                fmt::format("the watchdog process (pid {}) ended before the "
                                            "command started; not running it",
                                            pid));
            }
        }
        command_child child(o_.command,
                            command_environment(o_.name, lease, service_.etcd_key(lease)));
        if (child.pid() < 0) throw spawn_failure(child.error());
        const pid_t group = child.pid();  // the group's id
        watchdog_.watch(group);
        std::optional<steady::time_point> armed;  // the watchdog's deadline, as last sent
        const auto arm = [&](steady::time_point deadline) {
            if (armed && deadline < *armed + 1ms && deadline > *armed - 1ms) return;  // rounding
            watchdog_.arm(deadline);
            armed = deadline;
        };
        arm(steady::now() + lease.expires_in() - margin / 2);
        terminal_.give(group);
        if (const int exec_error = child.go(); exec_error != 0) {
            int raw = 0;
            while (::waitpid(group, &raw, 0) < 0 && errno == EINTR) {
            }
            terminal_.take_back();
            watchdog_.stand_down();
            std::error_code ec;
            lease.release(ec);
            throw spawn_failure(exec_error);
        }

        wake_flag lost_flag;
        std::optional<std::stop_callback<std::function<void()>>> on_lost;
        on_lost.emplace(lease.lost_token(),
                        std::function<void()>([&lost_flag] { lost_flag.raise(); }));

        bool lost = false;
        bool stopping = false;         // SIGTERM sent to the group (lost lock, or leftovers)
        bool deadline_missed = false;  // dlock missed the watchdog's deadline: it killed the group
        bool watchdog_died = false;
        bool max_hold_reached = false;  // the command was stopped because of --max-hold
        bool tstp_forwarded = false;    // a SIGTSTP sent to dlock was passed on to the group
        bool stop_noted = false;  // said once that a stop not from the terminal is not followed
        std::optional<steady::time_point> kill_at;
        std::optional<int> leader_status;  // raw waitpid() status once the command has ended
        int stopped_by = 0;                // the command has just been stopped by this signal

        // SIGTERM now (and SIGCONT, so stopped members can act on it), SIGKILL after --grace.
        const auto stop_group = [&](const std::string& why, std::string_view what) {
            if (stopping) return;
            stopping = true;
            console_.error(fmt::format("{}; stopping {} (SIGTERM now, SIGKILL in {})", why, what,
                                       format_duration(o_.grace)));
            ::kill(-group, SIGTERM);
            ::kill(-group, SIGCONT);
            kill_at = steady::now() + o_.grace;
            arm(*kill_at + margin);  // dlock kills it at kill_at; the watchdog if dlock cannot
        };
        const auto max_hold_message = [&] {
            return fmt::format("held the lock \"{}\" for --max-hold {}", o_.name,
                               format_duration(o_.max_hold));
        };
        const auto check_lost = [&] {
            if (lost || lease.state() != dlock::lock_state::lost) return;
            lost = true;
            max_hold_reached = lease.lost_reason() == dlock::lost_reason::max_hold;
            stop_group(max_hold_reached ? max_hold_message()
                                        : fmt::format("lost the lock \"{}\"", o_.name),
                       "the command");
        };
        // The lease ends within the margin and was not renewed (server unreachable, or the
        // --max-hold cap): stop the command now, before the lease can end, rather than after.
        const auto check_ending = [&] {
            if (lost || stopping) return;
            const auto left = lease.expires_in();
            if (left > margin) return;
            lost = true;
            const bool capped = o_.max_hold != dlock::forever &&
                                steady::now() - acquired_at + left >= o_.max_hold + margin - 200ms;
            max_hold_reached = capped;
            stop_group(capped ? max_hold_message()
                              : fmt::format("could not renew the lock \"{}\"; its lease ends in {}",
                                            o_.name, format_duration(left)),
                       "the command");
        };
        // dlock itself missed the deadline it gave the watchdog (it was stopped or starved): the
        // watchdog has killed the group, or is about to.
        const auto check_missed = [&](std::chrono::milliseconds slack) {
            if (deadline_missed || stopping || !armed || steady::now() < *armed - slack) return;
            deadline_missed = true;
            lost = true;
            stopping = true;
            kill_at.reset();
            ::kill(-group, SIGKILL);
            console_.error(
                fmt::format("dlock could not renew the lock \"{}\" in time (it was stopped or "
                            "starved); the command's process group was killed (SIGKILL) before "
                            "the lease could end",
                            o_.name));
        };

        for (;;) {
            int timeout = kill_at ? ms_until(*kill_at) : -1;
            if (!stopping) {
                // Wake when the lease comes within the margin of its end, and often enough to
                // move the watchdog's deadline along with the validity (ZooKeeper sessions
                // extend it without renewal events).
                const auto left = lease.expires_in() - margin;
                const auto beat = std::max<std::chrono::milliseconds>(margin / 2, 1ms);
                timeout = static_cast<int>(
                    std::clamp<std::chrono::milliseconds>(std::min(left, beat), 0ms, 60s).count());
            }
            // Members of the group are not dlock's children: no SIGCHLD tells when they are gone.
            if (leader_status) timeout = timeout < 0 ? 20 : std::min(timeout, 20);
            const auto r = wait_readable(signals_.fd(), lost_flag.fd(), renewed_.fd(), timeout);
            if (r.a) {
                while (const auto info = signals_.next()) {
                    const int sig = static_cast<int>(info->ssi_signo);
                    if (sig == SIGCHLD) {
                        int raw = 0;
                        pid_t pid = 0;
                        while (!leader_status &&
                               (pid = ::waitpid(group, &raw, WNOHANG | WUNTRACED)) == group) {
                            if (WIFSTOPPED(raw)) {
                                stopped_by = WSTOPSIG(raw);
                            } else {
                                leader_status = raw;
                                stopped_by = 0;
                            }
                        }
                        if (watchdog_.died(pid, raw) && !watchdog_died) {
                            watchdog_died = true;
                            // Without it, dlock's death would leave the group running unlocked.
                            ::kill(-group, SIGKILL);
                            stopping = true;
                            kill_at.reset();
                            console_.error(fmt::format(
                                "the watchdog process (pid {}) ended ({}): without it the "
                                "command's processes could outlive dlock; killed the command's "
                                "process group (SIGKILL)",
                                pid, describe_wait_status(raw)));
                        }
                        continue;
                    }
                    if (sig == SIGCONT) continue;  // dlock was continued: checked below
                    if (leader_status) continue;   // only leftovers remain: they are being stopped
                    if (sig == SIGTSTP) {
                        // Passed on; dlock stops when (and if) the command does.
                        tstp_forwarded = true;
                        ::kill(-group, SIGTSTP);
                        continue;
                    }
                    ::kill(-group, sig);
                    console_.verbose(fmt::format("forwarded {} to the command", signal_name(sig)));
                }
            }
            if (r.b) lost_flag.reset();
            if (r.c) renewed_.reset();
            check_missed(0ms);
            check_lost();
            check_ending();
            if (stopped_by != 0 && !stopping) {
                const int sig = std::exchange(stopped_by, 0);
                // Job control: Ctrl-Z on the terminal dlock gave the command, a SIGTSTP passed on
                // by dlock, or reading/writing the terminal from the background. The shell then
                // continues dlock (fg, bg), and dlock the command. Any other stop (kill -STOP of
                // the command's pid) is not followed: dlock keeps renewing, the command runs on
                // under the lock when someone continues it.
                const bool job_control =
                    (sig == SIGTSTP && (terminal_.given() || tstp_forwarded)) || sig == SIGTTIN ||
                    sig == SIGTTOU;
                tstp_forwarded = false;
                if (!job_control) {
                    if (!std::exchange(stop_noted, true)) {
                        console_.note(fmt::format(
                            "the command was stopped ({}), not from the terminal; dlock keeps "
                            "renewing the lock \"{}\" while it is stopped",
                            signal_name(sig), o_.name));
                    }
                } else {
                    follow_stopped_command(sig, group, lease, margin);
                    // Continued: too late if the watchdog's deadline has passed (or nearly) or
                    // the lease is lost or about to end.
                    check_missed(margin / 4);
                    if (!deadline_missed && (lease.state() == dlock::lock_state::lost ||
                                             lease.expires_in() <= margin)) {
                        lost = true;
                        stopping = true;
                        ::kill(-group, SIGKILL);
                        console_.error(fmt::format(
                            "the lock \"{}\" was lost while dlock was stopped; the stopped "
                            "command was killed (SIGKILL), not continued",
                            o_.name));
                    }
                    if (!stopping) {
                        arm(steady::now() + lease.expires_in() - margin / 2);
                        terminal_.give(group);  // after `fg`; not after `bg`
                        ::kill(-group, SIGCONT);
                    }
                }
            }
            stopped_by = 0;
            if (!stopping) arm(steady::now() + lease.expires_in() - margin / 2);
            if (kill_at && steady::now() >= *kill_at) {
                ::kill(-group, SIGKILL);
                console_.error(
                    fmt::format("the command did not stop within --grace {}; sent SIGKILL to its "
                                "process group",
                                format_duration(o_.grace)));
                kill_at.reset();
            }
            if (leader_status) {
                if (!group_alive(group)) break;
                // The command has ended but left processes in its group: they must not run on
                // without the lock.
                stop_group(
                    "the command exited, but processes it started still run in its process group",
                    "them");
            }
        }
        on_lost.reset();
        watchdog_.stand_down();
        const bool had_terminal = terminal_.given();
        terminal_.take_back();

        std::error_code ec;
        lease.release(ec);
        if (ec == dlock::errc::lock_lost && !lost) {
            lost = true;  // expired or taken over while the command ran, before we noticed
        } else if (ec && ec != dlock::errc::lock_lost) {
            console_.error(
                fmt::format("warning: could not release \"{}\" ({}); it expires within --lease {}",
                            o_.name, ec.message(), format_duration(o_.lease)));
        }
        const int command_status = decode_wait_status(*leader_status);
        if (watchdog_died && !lost) return exit_status::os_error;
        if (lost && max_hold_reached) {
            console_.error(fmt::format(
                "the command held the lock \"{}\" for --max-hold {} and was stopped (the "
                "command's own status: {}); exiting with {}",
                o_.name, format_duration(o_.max_hold), command_status, exit_status::max_hold));
            return exit_status::max_hold;
        }
        if (lost) {
            console_.error(
                fmt::format("the lock \"{}\" was lost while the command ran (the "
                            "command's own status: {}); exiting with {}",
                            o_.name, command_status, exit_status::lock_lost));
            return exit_status::lock_lost;
        }
        // Killed by a signal: end by the same one, so that the calling shell sees it (and a
        // shell loop stops on Ctrl-C), as timeout(1) does.
        if (WIFSIGNALED(*leader_status)) {
            const int sig = WTERMSIG(*leader_status);
            // Ctrl-C (or Ctrl-\) on the terminal reached only the command's group, which had the
            // terminal. Without dlock it would also have reached a shell without job control (a
            // script) sharing dlock's process group, and such a shell stops its loop only if it
            // got the signal itself: pass it on to dlock's group, as the terminal would have.
            if (had_terminal && (sig == SIGINT || sig == SIGQUIT) && ::getpgrp() != ::getpid()) {
                ::kill(0, sig);  // dlock's own copy stays blocked until die_by_signal()
            }
            die_by_signal(sig);
        }
        return command_status;
    }

    /// The command was stopped by `sig` through job control (Ctrl-Z, or using the terminal from
    /// the background): stop the rest of its group (even members that ignore SIGTSTP) and dlock
    /// itself, as the shell expects of its job. Returns once dlock is continued (`fg`, `bg`,
    /// SIGCONT); the caller then checks whether the lock survived the pause. Meanwhile nothing
    /// renews the lease, and the watchdog kills the group a margin before it could end.
    void follow_stopped_command(int sig, pid_t group, const dlock::lease& lease,
                                std::chrono::milliseconds margin) {
        ::kill(-group, SIGSTOP);
        terminal_.take_back();
        const auto left = std::max(lease.expires_in() - margin / 2, 0ms);
        console_.error(fmt::format(
            "the command was stopped ({}); dlock stops with it and cannot renew the lock \"{}\" "
            "meanwhile: stopped for more than {}, the command is killed before the lock can be "
            "lost, never continued",
            signal_name(sig), o_.name, format_duration(left)));
        stop_self();
    }

    cli_error spawn_failure(int error) const {
        if (error == ENOENT) {
            return {exit_status::command_not_found,
                    fmt::format("{}: command not found", o_.command.front())};
        }
        return {exit_status::cannot_execute,
                fmt::format("{}: {}", o_.command.front(), errno_text(error))};
    }

    const run_options& o_;
    console console_;
    // Before service_: its client threads must inherit the blocked mask, and the watchdog must
    // be forked before any thread exists.
    signal_watch signals_;
    group_watchdog watchdog_;
    terminal_control terminal_;
    wake_flag wait_started_;
    wake_flag renewed_;             // raised by on_event() at each renewal
    int unreachable_attempts_ = 0;  // acquire attempts that failed on an unreachable server
    std::atomic<bool> waiting_{false};
    std::atomic<bool> holding_{false};  // acquire() returned the lease
    std::mutex degraded_mutex_;         // guards the two below
    std::string degraded_;              // the first node_failed event, as the warning names it
    bool degraded_warned_ = false;      // the degraded-Redlock warning was printed
    const steady::time_point started_;
    lock_service service_;
};

}  // namespace

int run_command(const run_options& options) {
    runner r(options);
    return r.run();
}

}  // namespace dlock::cli
