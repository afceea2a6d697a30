// `dlock run` as a process supervisor (docs/cli.md, "Process supervision"), driven the way people
// use it: from an interactive shell on a pseudo-terminal (Ctrl-C, Ctrl-Z and fg, a prompt), from
// non-interactive scripts (nohup, background jobs), and by killing dlock with SIGKILL. The promise
// under test: the command runs only while the lock is held, and it behaves as it would without
// dlock (terminal, ignored signals, how it ended).
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "pty_shell.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "spawn.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"
#include "zk_server.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::cli_binary;
using dlock::test::cli_process;
using dlock::test::eventually;
using dlock::test::process_alive;
using dlock::test::process_state;
using dlock::test::pty_shell;
using dlock::test::read_text;
using dlock::test::run_cli;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::temp_dir;

using namespace dlock::test::exit_status;  // the documented exit statuses

std::string url() { return shared_redis().url(); }

bool exists(const std::string& path) { return std::filesystem::exists(path); }

/// The pid written to `file` by a script (`echo $$ > file`), or -1 until its whole line is there:
/// the shell creates the file before it writes the line, so a file that exists may still be empty.
pid_t pid_in(const std::string& file) {
    const std::string text = read_text(file);
    if (text.empty() || text.back() != '\n') return -1;
    return static_cast<pid_t>(std::atol(text.c_str()));
}

/// Whether a script has written its pid line to `file` (pid_in).
bool pid_written(const std::string& file) { return pid_in(file) > 0; }

/// Kills the processes whose pids the test's scripts wrote, in case a test failed before they
/// ended (the loops are bounded anyway).
class pid_files {
public:
    explicit pid_files(std::vector<std::string> files) : files_(std::move(files)) {}
    ~pid_files() {
        for (const auto& f : files_) {
            const pid_t p = pid_in(f);
            if (p > 0 && process_alive(p)) ::kill(p, SIGKILL);
        }
    }

private:
    std::vector<std::string> files_;
};

/// A log of "<who> <nanoseconds>" lines appended by the commands of several `dlock run`s.
struct log_line {
    std::string who;
    long long at;
};
std::vector<log_line> read_log(const std::string& path) {
    std::vector<log_line> out;
    std::istringstream in(read_text(path));
    for (std::string who; in >> who;) {
        long long at = 0;
        in >> at;
        out.push_back({who, at});
    }
    return out;
}
/// Whether a command started as "(G loop) & echo $! > DIR/gpid; echo $$ > DIR/pid; A loop" has
/// written both pid files and its grandchild G has logged (waits up to 10 s, scaled).
bool grandchild_started(const temp_dir& dir, const std::string& log) {
    return eventually(
        [&] {
            const auto l = read_log(log);
            return pid_written(dir / "pid") && pid_written(dir / "gpid") &&
                   std::count_if(l.begin(), l.end(), [](auto& x) { return x.who == "G"; }) > 0;
        },
        10s);
}
/// Lines of `who` written between `who2`-start and `who2`-end (the second holder's section).
std::vector<long long> overlapping(const std::vector<log_line>& log, const std::string& who,
                                   const std::string& section) {
    long long start = -1, end = -1;
    for (const auto& l : log) {
        if (l.who == section + "-start") start = l.at;
        if (l.who == section + "-end") end = l.at;
    }
    std::vector<long long> out;
    for (const auto& l : log) {
        if (l.who == who && start >= 0 && l.at >= start && (end < 0 || l.at <= end))
            out.push_back(l.at);
    }
    return out;
}
/// A command for the second holder: marks its critical section in the log.
std::vector<std::string> second_holder(const std::string& name, const std::string& log) {
    return {
        "run",
        "--wait",
        "30s",
        "--url",
        url(),
        name,
        "--",
        "sh",
        "-c",
        "echo B-start $(date +%s%N) >> " + log + "; sleep 0.5; echo B-end $(date +%s%N) >> " + log};
}

/// `sh` with the test's environment, running `script` with `args`; returns its pid.
pid_t start_script(const std::string& script, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"sh", script};
    argv.insert(argv.end(), args.begin(), args.end());
    return dlock::test::detail::spawn("/bin/sh", argv, -1);
}

// --- SIGKILL of dlock ------------------------------------------------------------------------

TEST(Supervision, KillingDlockKillsTheCommandAndWhatItStarted) {
    const auto name = dlock::test::unique_name("kill9");
    const temp_dir dir("dlock-supervision");
    const auto log = dir / "log";
    const pid_files cleanup({dir / "pid", dir / "gpid"});
    // The command and a grandchild both write to the log for at most ~20 s.
    const std::string loop = "i=0; while [ $i -lt 400 ]; do echo WHO $(date +%s%N) >> " + log +
                             "; sleep 0.05; i=$((i+1)); done";
    auto with = [&](const std::string& who) {
        std::string s = loop;
        s.replace(s.find("WHO"), 3, who);
        return s;
    };
    const std::string script = "(" + with("G") + ") & echo $! > " + (dir / "gpid") +
                               "; echo $$ > " + (dir / "pid") + "; " + with("A");
    cli_process run({"run", "--lease", "1s", "--url", url(), name, "--", "sh", "-c", script});
    ASSERT_TRUE(grandchild_started(dir, log)) << run.err();
    const pid_t command = pid_in(dir / "pid"), grandchild = pid_in(dir / "gpid");

    run.send(SIGKILL);
    EXPECT_EQ(run.wait(5s).status, 128 + SIGKILL);
    // The watchdog: both must be gone promptly, not one lease (or 20 s) later.
    EXPECT_TRUE(eventually([&] { return !process_alive(command); }, 2s)) << "command still runs";
    EXPECT_TRUE(eventually([&] { return !process_alive(grandchild); }, 2s))
        << "grandchild still runs";

    // The next holder (after the 1 s lease has run out) never runs beside them.
    const auto second = run_cli(second_holder(name, log), {}, 40s);
    EXPECT_EQ(second.status, 0) << second.err;
    const auto entries = read_log(log);
    EXPECT_EQ(overlapping(entries, "A", "B").size(), 0u) << read_text(log);
    EXPECT_EQ(overlapping(entries, "G", "B").size(), 0u) << read_text(log);
}

// --- stops that do not come from the terminal, and the watchdog as a dead-man's switch -------

/// A bash script that writes "<who> <ns>" to `log` every 50 ms, `ticks` times (timestamps from
/// $EPOCHREALTIME, without a fork), after writing its pid to `pid_file`.
std::string ticking(const std::string& who, int ticks, const std::string& log) {
    return "for ((i = 0; i < " + std::to_string(ticks) + "; i++)); do t=${EPOCHREALTIME/./}; " +
           "echo \"" + who + " ${t}000\" >> " + log + "; sleep 0.05; done";
}

/// The first "B-start" time in the log (the second holder's start), or -1.
long long second_start(const std::vector<log_line>& log) {
    for (const auto& l : log)
        if (l.who == "B-start") return l.at;
    return -1;
}

/// Lines of `who` written at or after the second holder started.
std::vector<long long> after_second_start(const std::vector<log_line>& log,
                                          const std::string& who) {
    const long long start = second_start(log);
    std::vector<long long> out;
    for (const auto& l : log)
        if (l.who == who && start >= 0 && l.at >= start) out.push_back(l.at);
    return out;
}

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

TEST(Supervision, CommandStoppedByPidKeepsTheLockAndNeverRunsUnlocked) {
    // kill -STOP / -CONT of the command's pid (not the terminal): dlock does not stop with it, so
    // nobody would continue dlock. It keeps renewing; the continued command runs under the lock.
    for (const int sig : {SIGSTOP, SIGTSTP}) {
        SCOPED_TRACE(sig == SIGSTOP ? "SIGSTOP" : "SIGTSTP");
        const auto name = dlock::test::unique_name("stop-by-pid");
        const temp_dir dir("dlock-supervision");
        const auto log = dir / "log";
        const pid_files cleanup({dir / "pid"});
        const auto lease = scaled(1s);
        cli_process run({"run", "--lease", ms(lease), "--url", url(), name, "--", "bash", "-c",
                         "echo $$ > " + (dir / "pid") + "; " + ticking("A", 60, log)});
        ASSERT_TRUE(eventually([&] { return read_log(log).size() >= 2; }, 10s)) << run.err();
        const pid_t command = pid_in(dir / "pid");
        ::kill(command, sig);
        ASSERT_TRUE(eventually([&] { return process_state(command) == 'T'; }, 5s)) << run.err();
        // Stopped for three leases: the lock stays held (dlock renews it meanwhile).
        const auto probe =
            run_cli({"run", "--wait", ms(3 * lease), "--url", url(), name, "--", "true"}, {}, 30s);
        EXPECT_EQ(probe.status, 75) << "the lock was free while the command was stopped\n"
                                    << probe.err << run.err();
        ::kill(command, SIGCONT);
        // The next holder gets the lock only once the continued command has ended.
        const auto second = run_cli(second_holder(name, log), {}, 60s);
        EXPECT_EQ(second.status, 0) << second.err;
        const auto entries = read_log(log);
        EXPECT_EQ(after_second_start(entries, "A").size(), 0u) << read_text(log) << run.err();
        EXPECT_TRUE(eventually([&] { return !run.running(); }, 20s)) << run.err();
        if (!run.running()) {
            EXPECT_EQ(run.wait(1s).status, 0) << run.err();
        }
    }
}

TEST(Supervision, StoppedDlockHasItsCommandKilledBeforeTheLeaseEnds) {
    // SIGSTOP of dlock itself (a debugger, a starved or frozen process): nothing renews the lease,
    // and the watchdog kills the command's group before the lease can end.
    const auto name = dlock::test::unique_name("dead-man");
    const temp_dir dir("dlock-supervision");
    const auto log = dir / "log";
    const pid_files cleanup({dir / "pid", dir / "gpid"});
    const std::string script = "(" + ticking("G", 400, log) + ") & echo $! > " + (dir / "gpid") +
                               "; echo $$ > " + (dir / "pid") + "; " + ticking("A", 400, log);
    cli_process run(
        {"run", "--lease", ms(scaled(1s)), "--url", url(), name, "--", "bash", "-c", script});
    ASSERT_TRUE(grandchild_started(dir, log)) << run.err();
    const pid_t command = pid_in(dir / "pid"), grandchild = pid_in(dir / "gpid");

    run.send(SIGSTOP);
    // The next holder gets the lock once the lease has ended: by then nothing of the first
    // command runs, and nothing of it wrote after the second holder started.
    const auto second = run_cli(second_holder(name, log), {}, 40s);
    EXPECT_EQ(second.status, 0) << second.err;
    EXPECT_FALSE(process_alive(command)) << "the command outlived the lease of a stopped dlock";
    EXPECT_FALSE(process_alive(grandchild)) << "the grandchild outlived the lease";
    const auto entries = read_log(log);
    EXPECT_EQ(after_second_start(entries, "A").size(), 0u) << read_text(log);
    EXPECT_EQ(after_second_start(entries, "G").size(), 0u) << read_text(log);

    // Continued, dlock says what happened and exits with 79.
    run.send(SIGCONT);
    const auto r = run.wait(10s);
    EXPECT_EQ(r.status, lock_lost) << r.err;
    EXPECT_NE(r.err.find("stopped or starved"), std::string::npos) << r.err;
}

/// The pids whose parent is `parent`.
std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
        const std::string pid = e.path().filename().string();
        if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string stat = read_text("/proc/" + pid + "/stat");
        const auto paren = stat.rfind(')');
        if (paren == std::string::npos) continue;
        std::istringstream fields(stat.substr(paren + 1));
        char state = 0;
        long ppid = 0;
        if (fields >> state >> ppid && ppid == parent) out.push_back(std::stoi(pid));
    }
    return out;
}

TEST(Supervision, WatchdogIsNamedAndKillingItFirstLeavesNothingRunning) {
    const auto name = dlock::test::unique_name("watchdog");
    const temp_dir dir("dlock-supervision");
    const auto log = dir / "log";
    const pid_files cleanup({dir / "pid", dir / "gpid"});
    const std::string script = "(" + ticking("G", 400, log) + ") & echo $! > " + (dir / "gpid") +
                               "; echo $$ > " + (dir / "pid") + "; " + ticking("A", 400, log);
    cli_process run({"run", "--url", url(), name, "--", "bash", "-c", script});
    ASSERT_TRUE(
        eventually([&] { return pid_written(dir / "pid") && pid_written(dir / "gpid"); }, 10s))
        << run.err();
    const pid_t command = pid_in(dir / "pid"), grandchild = pid_in(dir / "gpid");
    pid_t watchdog = -1;
    for (const pid_t child : children_of(run.pid()))
        if (child != command) watchdog = child;
    ASSERT_GT(watchdog, 0) << "no watchdog process";
    // ps shows it as the watchdog, not as a second `dlock run`.
    const std::string proc = "/proc/" + std::to_string(watchdog);
    EXPECT_EQ(read_text(proc + "/comm"), "dlock-watchdog\n");
    const std::string cmdline = read_text(proc + "/cmdline");
    EXPECT_EQ(cmdline.substr(0, cmdline.find('\0')), "dlock-watchdog");
    EXPECT_EQ(cmdline.find("run"), std::string::npos) << cmdline;

    // Killing the watchdog first: dlock notices and kills the command's group at once, so a
    // SIGKILL of dlock afterwards leaves nothing of it running unlocked.
    ::kill(watchdog, SIGKILL);
    EXPECT_TRUE(
        eventually([&] { return !process_alive(grandchild) && !process_alive(command); }, 5s))
        << "the command's group runs on without a watchdog\n"
        << run.err();
    EXPECT_TRUE(eventually([&] { return !run.running(); }, 5s)) << run.err();
    if (run.running()) run.send(SIGKILL);  // then dlock's own death must not leave it running
    const auto r = run.wait(10s);
    EXPECT_EQ(r.status, 71) << r.err;
    EXPECT_NE(r.err.find("watchdog"), std::string::npos) << r.err;
    EXPECT_TRUE(eventually([&] { return !process_alive(grandchild); }, 2s))
        << "the grandchild survived dlock and its watchdog";
}

// --- a lost lock stops the whole process group ---------------------------------------------

TEST(Supervision, LostLockKillsGrandchildrenThatIgnoreSigterm) {
    const auto name = dlock::test::unique_name("group");
    const temp_dir dir("dlock-supervision");
    const pid_files cleanup({dir / "gpid"});
    // The command (the group leader) dies of SIGTERM; its child ignores SIGTERM.
    const std::string script =
        "(trap '' TERM; i=0; while [ $i -lt 400 ]; do sleep 0.05; "
        "i=$((i+1)); done) & echo $! > " +
        (dir / "gpid") + "; touch " + (dir / "ready") + "; wait";
    cli_process run({"run", "--lease", "1s", "--grace", "300ms", "--url", url(), name, "--", "sh",
                     "-c", script});
    ASSERT_TRUE(eventually([&] { return exists(dir / "ready"); }, 10s)) << run.err();
    const pid_t grandchild = pid_in(dir / "gpid");
    const dlock::redis::client inspect({.url = url()});
    shared_redis().command({"DEL", inspect.lock_key(name)});
    const auto r = run.wait(10s);
    EXPECT_EQ(r.status, lock_lost) << r.err;
    // dlock ended only after the whole group had: SIGKILL reached the grandchild.
    EXPECT_FALSE(process_alive(grandchild)) << r.err;
    EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
}

// --- inherited ignored signals stay ignored ------------------------------------------------

/// The command of the script tests: records its ignored-signal mask, marks a forwarded SIGUSR1,
/// and runs until `done` appears (at most ~20 s).
std::string write_command(const temp_dir& dir) {
    return dir.write("command.sh",
                     "D=$1\n"
                     "trap 'echo usr1 > \"$D/usr1\"' USR1\n"
                     "grep SigIgn /proc/$$/status > \"$D/sigign\"\n"
                     "touch \"$D/ready\"\n"
                     "i=0; while [ ! -e \"$D/done\" ] && [ $i -lt 400 ]; do sleep 0.05; "
                     "i=$((i+1)); done\n");
}

/// Whether signal `sig` is in a "SigIgn:\t<hex mask>" line.
bool ignores(const std::string& sigign_line, int sig) {
    const auto tab = sigign_line.find_first_of("\t ");
    if (tab == std::string::npos) return false;
    const unsigned long long mask = std::stoull(sigign_line.substr(tab + 1), nullptr, 16);
    return ((mask >> (sig - 1)) & 1) != 0;
}

/// Runs `launcher` (a script that starts dlock in the background, writes its pid to $D/pid and
/// its exit status to $D/status), sends `sig` to dlock once the command runs, then a SIGUSR1
/// (forwarded) as a probe that the first one has been dealt with, and ends the command.
void expect_signal_stays_ignored(const std::string& launcher_text, int sig) {
    const auto name = dlock::test::unique_name("ignored");
    const temp_dir dir("dlock-supervision");
    const pid_files cleanup({dir / "pid"});
    write_command(dir);
    const auto launcher = dir.write("launcher.sh", launcher_text);
    const pid_t sh = start_script(launcher, {dir.path(), cli_binary(), url(), name});
    ASSERT_TRUE(eventually([&] { return exists(dir / "ready") && pid_written(dir / "pid"); }, 10s));
    const pid_t dlock = pid_in(dir / "pid");
    EXPECT_TRUE(ignores(read_text(dir / "sigign"), sig))
        << "the command does not inherit the ignored signal: " << read_text(dir / "sigign");
    ::kill(dlock, sig);
    ::kill(dlock, SIGUSR1);
    EXPECT_TRUE(eventually([&] { return exists(dir / "usr1") || exists(dir / "status"); }, 10s));
    std::ofstream(dir / "done").close();
    int raw = 0;
    EXPECT_TRUE(dlock::test::detail::wait_for(sh, scaled(20s), raw));
    EXPECT_EQ(read_text(dir / "status"), "0\n") << "dlock's status";
    EXPECT_EQ(read_text(dir / "usr1"), "usr1\n");
}

TEST(Supervision, NohupKeepsSighupIgnored) {
    expect_signal_stays_ignored(
        "D=$1\n"
        "nohup \"$2\" run --url \"$3\" \"$4\" -- sh \"$D/command.sh\" \"$D\" > \"$D/out\" 2>&1 &\n"
        "echo $! > \"$D/pid\"\n"
        "wait $!\n"
        "echo $? > \"$D/status\"\n",
        SIGHUP);
}

TEST(Supervision, BackgroundJobOfAScriptKeepsSigintIgnored) {
    // A non-interactive shell starts `&` jobs with SIGINT and SIGQUIT ignored.
    expect_signal_stays_ignored(
        "D=$1\n"
        "\"$2\" run --url \"$3\" \"$4\" -- sh \"$D/command.sh\" \"$D\" &\n"
        "echo $! > \"$D/pid\"\n"
        "wait $!\n"
        "echo $? > \"$D/status\"\n",
        SIGINT);
}

// --- descriptors -----------------------------------------------------------------------------

/// The descriptors open in process `pid`, sorted.
std::vector<int> open_fds(pid_t pid) {
    std::vector<int> fds;
    for (const auto& e :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
        fds.push_back(std::stoi(e.path().filename().string()));
    std::sort(fds.begin(), fds.end());
    return fds;
}

/// Runs a shell under `lock_url` and returns the descriptors it holds once it is waiting for its
/// `sleep` (a shell that is not reading a script has nothing else open).
std::vector<int> command_fds(const std::string& lock_url) {
    const temp_dir dir("dlock-supervision");
    const pid_files cleanup({dir / "pid"});
    cli_process run({"run", "--url", lock_url, dlock::test::unique_name("fds"), "--", "sh", "-c",
                     "echo $$ > " + (dir / "pid") + "; touch " + (dir / "ready") + "; sleep 20"});
    std::vector<int> fds;
    EXPECT_TRUE(eventually([&] { return exists(dir / "ready"); }, 20s)) << run.err();
    const pid_t p = pid_in(dir / "pid");
    if (p > 0) fds = open_fds(p);
    for (const int fd : fds) {
        if (fd > 2) {
            std::error_code ec;
            ADD_FAILURE() << "descriptor " << fd << " -> "
                          << std::filesystem::read_symlink(
                                 "/proc/" + std::to_string(p) + "/fd/" + std::to_string(fd), ec)
                                 .string();
        }
    }
    run.send(SIGTERM);
    run.wait(10s);
    return fds;
}

TEST(Supervision, CommandInheritsOnlyStdinStdoutStderr) {
    const std::vector<int> stdio = {0, 1, 2};
    EXPECT_EQ(command_fds(url()), stdio) << "redis://";
#if DLOCK_HAS_ZOOKEEPER
    const dlock::test::zk_ensemble zk(1);
    EXPECT_EQ(command_fds(zk.url()), stdio) << "zk://";
#endif
}

// --- credentials -----------------------------------------------------------------------------

TEST(Supervision, PasswordsStayWithDlock) {
    const dlock::test::redis_server server({.extra_args = {"--requirepass", "s3cret"}});
    const std::string plain = "redis://127.0.0.1:" + std::to_string(server.port());
    const std::string with_password = "redis://:s3cret@127.0.0.1:" + std::to_string(server.port());
    const auto name = dlock::test::unique_name("password");
    const temp_dir dir("dlock-supervision");
    const std::vector<std::string> print_env = {"--", "sh", "-c", "env; cat /proc/$PPID/cmdline"};
    const auto run_with = [&](std::vector<std::string> args, std::vector<std::string> env) {
        args.push_back(name);
        args.insert(args.end(), print_env.begin(), print_env.end());
        return run_cli(args, {.env = std::move(env)});
    };
    const auto no_password = [](const dlock::test::cli_result& r) {
        return r.out.find("s3cret") == std::string::npos &&
               r.err.find("s3cret") == std::string::npos;
    };
    // Only the lines that give the password away (not the whole environment) on failure.
    const auto leaks = [](const dlock::test::cli_result& r) {
        std::string out;
        std::istringstream in(r.out + r.err);
        for (std::string line; std::getline(in, line);) {
            if (line.find("s3cret") != std::string::npos) out += line + "\n";
        }
        return out;
    };

    // In DLOCK_URL: the command does not get it.
    auto r = run_with({"run"}, {"DLOCK_URL=" + with_password});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(no_password(r)) << leaks(r);

    // In DLOCK_PASSWORD: dlock uses it, and the command does not get it.
    r = run_with({"run", "--url", plain}, {"DLOCK_PASSWORD=s3cret"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(no_password(r)) << leaks(r);
    EXPECT_EQ(r.out.find("DLOCK_PASSWORD"), std::string::npos) << r.out;

    // In a file only its owner can read.
    const auto file = dir.write("password", "s3cret\n");
    ::chmod(file.c_str(), 0600);
    r = run_with({"run", "--password-file", file, "--url", plain}, {});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(no_password(r)) << leaks(r);

    // In --url: not in dlock's /proc/<pid>/cmdline once it has parsed it.
    r = run_with({"run", "--url", with_password}, {});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(no_password(r)) << leaks(r);

    // A wrong password from the file: refused, and never printed.
    const auto wrong = dir.write("wrong", "wr0ng-pw\n");
    r = run_with({"run", "--password-file", wrong, "--url", plain}, {});
    EXPECT_EQ(r.status, 77) << r.err;
    EXPECT_EQ(r.err.find("wr0ng"), std::string::npos) << r.err;
    // A missing file: a usage error.
    r = run_with({"run", "--password-file", dir / "missing", "--url", plain}, {});
    EXPECT_EQ(r.status, 64) << r.err;
}

// --- at a terminal ---------------------------------------------------------------------------

/// An interactive bash on a pseudo-terminal with $DLOCK, $U (the lock server), $N (a lock
/// name) and $D (a temp dir) set.
struct terminal_session {
    explicit terminal_session(const std::string& hint)
        : name(dlock::test::unique_name(hint)),
          shell({"DLOCK=" + cli_binary(), "U=" + url(), "N=" + name, "D=" + dir.path()}) {}
    std::string name;
    const temp_dir dir{"dlock-supervision"};
    pty_shell shell;
};

/// The last "rc=<n>" on the screen after `from`, or -1.
int last_rc(const std::string& screen, std::size_t from) {
    const auto at = screen.rfind("rc=");
    if (at == std::string::npos || at < from) return -1;
    return std::atoi(screen.c_str() + at + 3);
}

TEST(SupervisionTerminal, CommandCanPromptOnTheTerminal) {
    terminal_session t("prompt");
    const auto mark = t.shell.screen().size();
    t.shell.type(
        "\"$DLOCK\" run --url \"$U\" \"$N\" -- sh -c 'printf \"Proceed? \"; read a; echo "
        "\"answer=$a\" > \"$D/answer\"'; echo \"rc=$?\"\n");
    ASSERT_TRUE(t.shell.wait_for("Proceed? ", 10s, mark)) << t.shell.screen();
    t.shell.type("yes\n");
    EXPECT_TRUE(t.shell.wait_for("rc=", 10s, mark)) << t.shell.screen();
    EXPECT_EQ(read_text(t.dir / "answer"), "answer=yes\n") << t.shell.screen();
    EXPECT_EQ(last_rc(t.shell.screen(), mark), 0) << t.shell.screen();
}

TEST(SupervisionTerminal, CtrlCStopsAShellLoop) {
    terminal_session t("ctrl-c");
    const auto mark = t.shell.screen().size();
    t.shell.type(
        "for i in 1 2 3; do \"$DLOCK\" run --url \"$U\" \"$N\" -- sh -c 'echo x >> "
        "\"$D/iterations\"; sleep 2'; done\n");
    ASSERT_TRUE(eventually([&] { return read_text(t.dir / "iterations") == "x\n"; }, 10s))
        << t.shell.screen();
    t.shell.type("\x03");
    t.shell.type("echo \"after-$((40+2))\"\n");
    EXPECT_TRUE(t.shell.wait_for("after-42", 20s, mark)) << t.shell.screen();
    // The loop ended with the first iteration: bash saw dlock die of SIGINT.
    EXPECT_EQ(read_text(t.dir / "iterations"), "x\n") << t.shell.screen();
}

TEST(SupervisionTerminal, CtrlCStopsALoopInAScript) {
    // A script's shell has no job control: it shares its process group (the terminal's
    // foreground group) with dlock, and stops its loop only if it gets the SIGINT itself.
    terminal_session t("ctrl-c-script");
    const auto mark = t.shell.screen().size();
    t.dir.write("loop.sh",
                "for i in 1 2 3; do \"$DLOCK\" run --url \"$U\" \"$N\" -- sh -c 'echo x >> "
                "\"$D/iterations\"; sleep 2'; done\n");
    t.shell.type("bash \"$D/loop.sh\"\n");
    ASSERT_TRUE(eventually([&] { return read_text(t.dir / "iterations") == "x\n"; }, 10s))
        << t.shell.screen();
    t.shell.type("\x03");
    t.shell.type("echo \"after-$((40+2))\"\n");
    EXPECT_TRUE(t.shell.wait_for("after-42", 20s, mark)) << t.shell.screen();
    EXPECT_EQ(read_text(t.dir / "iterations"), "x\n") << t.shell.screen();
}

TEST(SupervisionTerminal, CtrlZStopsTheCommandWithDlock) {
    terminal_session t("ctrl-z");
    const auto log = t.dir / "log";
    const pid_files cleanup({t.dir / "pid"});
    // bash, not dash: dash starts `sleep` with vfork(), and a Ctrl-Z that catches its child
    // between vfork and exec leaves dash unable to stop until the child runs on (with or
    // without dlock). The timestamps come from $EPOCHREALTIME (microseconds), without a fork.
    t.dir.write("ticks.sh",
                "echo $$ > \"$D/pid\"\n"
                "for ((i = 0; i < 400; i++)); do t=${EPOCHREALTIME/./}; echo \"A ${t}000\" >> "
                "\"$D/log\"; sleep 0.05; done\n");
    const auto lease = std::to_string(scaled(3s).count()) + "ms";
    const auto mark = t.shell.screen().size();
    t.shell.type("\"$DLOCK\" run --lease " + lease +
                 " --url \"$U\" \"$N\" -- bash \"$D/ticks.sh\"\n");
    ASSERT_TRUE(eventually([&] { return read_log(log).size() >= 2; }, 10s)) << t.shell.screen();
    const pid_t command = pid_in(t.dir / "pid");

    // Ctrl-Z stops the command with dlock; fg continues both (the lease has not run out).
    t.shell.type("\x1a");
    ASSERT_TRUE(eventually([&] { return process_state(command) == 'T'; }, 5s))
        << "the command keeps running while dlock is stopped:\n"
        << t.shell.screen();
    ASSERT_TRUE(t.shell.wait_for("Stopped", 5s, mark)) << t.shell.screen();
    auto ticks = read_log(log).size();
    t.shell.type("fg\n");
    EXPECT_TRUE(eventually([&] { return read_log(log).size() > ticks; }, 5s)) << t.shell.screen();

    // Stopped for longer than the lease: another holder gets the lock, and after fg the command
    // is killed, never continued.
    const auto mark2 = t.shell.screen().size();
    t.shell.type("\x1a");
    ASSERT_TRUE(eventually([&] { return process_state(command) == 'T'; }, 5s)) << t.shell.screen();
    ASSERT_TRUE(t.shell.wait_for("Stopped", 5s, mark2)) << t.shell.screen();
    const auto second = run_cli(second_holder(t.name, log), {}, 40s);
    EXPECT_EQ(second.status, 0) << second.err;
    t.shell.type("fg\n");
    t.shell.type("echo \"rc=$?\"\n");
    EXPECT_TRUE(t.shell.wait_for("rc=", 10s, mark2)) << t.shell.screen();
    EXPECT_EQ(last_rc(t.shell.screen(), mark2), lock_lost) << t.shell.screen();
    EXPECT_FALSE(process_alive(command));
    const auto entries = read_log(log);
    EXPECT_EQ(overlapping(entries, "A", "B").size(), 0u) << read_text(log);
    // Nothing of the command ran after the second holder started.
    long long b_start = 0;
    for (const auto& l : entries)
        if (l.who == "B-start") b_start = l.at;
    for (const auto& l : entries) {
        if (l.who == "A") {
            EXPECT_LT(l.at, b_start) << read_text(log);
        }
    }
}

TEST(SupervisionTerminal, StoppedCommandDoesNotHoldTheLockForever) {
    // dlock in the background: the command is stopped when it reads the terminal (SIGTTIN).
    terminal_session t("ttin");
    const pid_files cleanup({t.dir / "pid"});
    const auto mark = t.shell.screen().size();
    t.shell.type(
        "\"$DLOCK\" run --lease 1s --url \"$U\" \"$N\" -- sh -c 'echo $$ > \"$D/pid\"; "
        "read a' &\n");
    ASSERT_TRUE(eventually([&] { return process_state(pid_in(t.dir / "pid")) == 'T'; }, 10s))
        << t.shell.screen();
    // The lock is free again within about a lease, and dlock said why.
    const auto wait = std::to_string(scaled(5s).count()) + "ms";
    const auto r = run_cli({"run", "--wait", wait, "--url", url(), t.name, "--", "true"}, {}, 30s);
    EXPECT_EQ(r.status, 0) << r.err << t.shell.screen();
    EXPECT_TRUE(t.shell.wait_for("stopped", 5s, mark)) << t.shell.screen();
    // Continued, dlock finds the lock lost and kills the command rather than continuing it.
    t.shell.type("kill -CONT %1; wait %1; echo \"rc=$?\"\n");
    EXPECT_TRUE(t.shell.wait_for("rc=", 10s, mark)) << t.shell.screen();
    EXPECT_EQ(last_rc(t.shell.screen(), mark), lock_lost) << t.shell.screen();
}

}  // namespace
