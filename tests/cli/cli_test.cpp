// The `dlock` command-line tool, driven as a process like a user would (as etcdctl's e2e
// tests do): exit statuses, the command's environment, exclusion between two `dlock run`s, a lost
// lock stopping the command, signal forwarding, `status`, `demo`, and a clear one-line message
// with a documented status for every bad input (docs/cli.md).
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"
#include "zk_server.hpp"
#if DLOCK_HAS_ETCD
#include <dlock/etcd/client.hpp>

#include "etcd_server.hpp"
#include "tls_certs.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using dlock::test::cli_options;
using dlock::test::cli_process;
using dlock::test::cli_result;
using dlock::test::eventually;
using dlock::test::read_text;
using dlock::test::run_cli;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::temp_dir;
using dlock::test::vote_bound;

using namespace dlock::test::exit_status;  // the documented exit statuses

std::string url() { return shared_redis().url(); }

/// The Redis key holding lock `name` (asked from the library rather than spelled out here).
std::string lock_key(const std::string& name) {
    const dlock::redis::client c({.url = url()});  // connects lazily: this opens no connection
    return c.lock_key(name);
}

/// A shell loop that runs for at most ~20 s, so no test leaves a command running for long.
constexpr const char* bounded_loop = "i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done";

/// Every bad input gets exactly one line on stderr, and never an exception dump.
void expect_one_line(const cli_result& r) {
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("dlock: ")) << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("what()"), std::string::npos) << r.err;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// --- dlock run: the command's status and environment ------------------------------------------

TEST(CliRun, ExitsWithTheCommandsStatus) {
    const auto name = dlock::test::unique_name("status");
    auto r = run_cli({"run", "--url", url(), name, "--", "sh", "-c", "exit 7"});
    EXPECT_EQ(r.status, 7) << r.err;
    EXPECT_EQ(r.err, "");
    r = run_cli({"run", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    // Killed by a signal: 128 + N, like a shell; the lock is released all the same.
    r = run_cli({"run", "--url", url(), name, "--", "sh", "-c", "kill -KILL $$"});
    EXPECT_EQ(r.status, 128 + SIGKILL) << r.err;
    EXPECT_EQ(shared_redis().command({"EXISTS", lock_key(name)}), "0");
}

TEST(CliRun, CommandGetsNameAndFencingToken) {
    const auto name = dlock::test::unique_name("env");
    const std::vector<std::string> print = {"sh", "-c",
                                            "echo \"$DLOCK_NAME $DLOCK_FENCING_TOKEN\""};
    std::vector<std::string> args = {"run", "--url", url(), name, "--"};
    args.insert(args.end(), print.begin(), print.end());
    // A counter above the server's clock in microseconds (the year 2128): grants count from it
    // one by one (a token is max(counter + 1, the clock), docs/redis-lock.md).
    dlock::redis::client redis({.url = url()});
    redis.command({"SET", redis.fence_key(name), "5000000000000000"});
    // Inherited values are replaced, not passed through.
    const auto first = run_cli(args, {.env = {"DLOCK_NAME=stale", "DLOCK_FENCING_TOKEN=999"}});
    EXPECT_EQ(first.status, 0) << first.err;
    EXPECT_EQ(first.out, name + " 5000000000000001\n");
    const auto second = run_cli(args);
    EXPECT_EQ(second.out, name + " 5000000000000002\n");  // each grant's token is larger
}

TEST(CliRun, EverythingAfterTheNameIsTheCommand) {
    const auto name = dlock::test::unique_name("split");
    // Without "--": the command's own options are not taken for dlock's.
    auto r = run_cli({"run", "--url", url(), name, "echo", "--verbose", "-q"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "--verbose -q\n");
    r = run_cli({"run", "--url=" + url(), name, "sh", "-c", "exit 3"});
    EXPECT_EQ(r.status, 3) << r.err;
}

TEST(CliRun, TheCommandIsRunVerbatimWhateverItsWordsLookLike) {
    const auto name = dlock::test::unique_name("verbatim");
    // A "--" of the command's own is the command's: not a separator for dlock.
    auto r = run_cli({"run", "--url", url(), name, "echo", "a", "--", "b"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "a -- b\n");
    r = run_cli({"run", "--url", url(), name, "echo", "--", "hi"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "-- hi\n");
    // The command's -c and its "--": grep counts the lines that match "x".
    const temp_dir dir("dlock-cli-markers");
    std::ofstream(dir / "file") << "x\ny\nx\n";
    r = run_cli({"run", "--url", url(), name, "grep", "-c", "--", "x", dir / "file"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "2\n");
    // A "--" right after NAME separates (and is dropped); the command's own "--" stays.
    r = run_cli({"run", "--url", url(), name, "--", "echo", "--", "hi"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "-- hi\n");
    // Words that look like dlock's options, a password among them, reach the command as typed.
    r = run_cli({"run", "--url", url(), name, "echo", "--url=redis://:pw@h", "--no-wait", "-q",
                 "--lease", "1ms"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "--url=redis://:pw@h --no-wait -q --lease 1ms\n");
}

TEST(CliRun, DashDashBeforeTheNameAllowsANameStartingWithADash) {
    const auto name = "-" + dlock::test::unique_name("dash");
    auto r = run_cli({"run", "--no-wait", "--url", url(), "--", name, "echo", "ran"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "ran\n");
    // "--" both before and after the name, as flock(1) allows.
    r = run_cli({"run", "--url", url(), "--", name, "--", "sh", "-c", "echo \"$DLOCK_NAME\""});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, name + "\n");
    // The lock really is that name: held by one, refused to the next.
    cli_process holder({"run", "--url", url(), "--", name, "sh", "-c", bounded_loop});
    ASSERT_TRUE(eventually(
        [&] {
            return shared_redis().command({"EXISTS", lock_key(name)}) == "1";
        },
        10s))
        << holder.err();
    r = run_cli({"run", "--no-wait", "--url", url(), "--", name, "true"});
    EXPECT_EQ(r.status, conflict) << r.err;
}

TEST(CliRun, PasswordHidingLeavesTheCommandsWordsAlone) {
    // dlock overwrites the password of its own --url in its process list entry; the command's
    // words, even those that look like a dlock option with a password, stay as typed there.
    const dlock::test::redis_server server({.extra_args = {"--requirepass", "s3cret"}});
    const std::string with_password = "redis://:s3cret@127.0.0.1:" + std::to_string(server.port());
    const auto name = dlock::test::unique_name("scrub");
    const auto r =
        run_cli({"run", "--url", with_password, name, "sh", "-c",
                 "tr '\\0' ' ' < /proc/$PPID/cmdline", "sh", "--url=redis://:w0rd@h",
                 "--password-file", "redis://:w1rd@h", "--", "--url", "redis://:w2rd@h"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("s3cret"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--url=redis://:w0rd@h --password-file redis://:w1rd@h -- --url "
                         "redis://:w2rd@h"),
              std::string::npos)
        << r.out;
}

TEST(CliRun, AcceptsEveryDurationForm) {
    const auto name = dlock::test::unique_name("durations");
    auto r = run_cli({"run", "--lease", "1m30s", "--grace", "1.5s", "--max-hold", "forever",
                      "--wait", "2h", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    r = run_cli({"run", "--lease", "90", "--wait=500ms", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;  // a plain number is seconds
}

TEST(CliRun, CommandNotFoundIs127) {
    const auto name = dlock::test::unique_name("missing");
    const auto r = run_cli({"run", "--url", url(), name, "--", "dlock-no-such-command-xyz"});
    EXPECT_EQ(r.status, not_found);
    EXPECT_NE(r.err.find("command not found"), std::string::npos) << r.err;
    EXPECT_EQ(shared_redis().command({"EXISTS", lock_key(name)}), "0");
}

TEST(CliRun, UsesDlockUrlFromTheEnvironment) {
    const auto name = dlock::test::unique_name("env-url");
    const auto r = run_cli({"run", name, "--", "true"}, {.env = {"DLOCK_URL=" + url()}});
    EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliRun, VerbosePrintsLockEvents) {
    const auto name = dlock::test::unique_name("verbose");
    dlock::redis::client redis({.url = url()});
    redis.command({"SET", redis.fence_key(name), "5000000000000000"});  // see above
    const auto r = run_cli({"run", "-v", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("acquired \"" + name + "\" (fencing token 5000000000000001)"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("released"), std::string::npos) << r.err;
}

// --- exclusion and contention -----------------------------------------------------------------

TEST(CliRun, RunsOnOneNameTakeTurns) {
    const auto name = dlock::test::unique_name("turns");
    const temp_dir dir("dlock-cli-markers");
    const auto log = dir / "log";
    // Each critical section appends "start <ns>" and "end <ns>"; O_APPEND keeps lines whole.
    const std::string section =
        "echo start $(date +%s%N) >> " + log + "; sleep 0.2; echo end $(date +%s%N) >> " + log;
    std::vector<std::unique_ptr<cli_process>> runs(3);
    for (auto& run : runs) {
        run = std::make_unique<cli_process>(
            std::vector<std::string>{"run", "--url", url(), name, "--", "sh", "-c", section});
    }
    for (auto& run : runs) {
        const auto r = run->wait(20s);
        EXPECT_EQ(r.status, 0) << r.err;
    }
    struct mark {
        long long at;
        bool start;
    };
    std::vector<mark> marks;
    for (const auto& line : lines_of(read_text(log))) {
        const auto space = line.find(' ');
        marks.push_back({std::stoll(line.substr(space + 1)), line.starts_with("start")});
    }
    ASSERT_EQ(marks.size(), 6u) << read_text(log);
    std::sort(marks.begin(), marks.end(), [](const mark& a, const mark& b) { return a.at < b.at; });
    for (std::size_t i = 0; i < marks.size(); ++i) {
        EXPECT_EQ(marks[i].start, i % 2 == 0) << "critical sections overlap:\n" << read_text(log);
    }
}

/// Holds lock `name` from this test process until destroyed.
class holder {
public:
    explicit holder(const std::string& name)
        : client_({.url = url()}), lease_(client_.acquire(name, {.lease = 10s, .wait = 0s})) {}
    std::uint64_t token() const { return lease_.fencing_token(); }
    void release() { lease_.release(); }

private:
    dlock::redis::client client_;
    dlock::lease lease_;
};

TEST(CliRun, NoWaitWhenHeldExitsWithConflictStatus) {
    const auto name = dlock::test::unique_name("no-wait");
    holder held(name);
    auto r = run_cli({"run", "--no-wait", "--url", url(), name, "--", "echo", "ran"});
    EXPECT_EQ(r.status, conflict);
    EXPECT_EQ(r.out, "");  // the command did not run
    EXPECT_NE(r.err.find("held by someone else"), std::string::npos) << r.err;
    expect_one_line(r);

    // flock -E: a status of the caller's choice, and --quiet for no message at all.
    r = run_cli({"run", "-q", "--no-wait", "--conflict-exit-code", "0", "--url", url(), name, "--",
                 "echo", "ran"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "");

    const auto started = std::chrono::steady_clock::now();
    r = run_cli({"run", "--wait", "300ms", "--url", url(), name, "--", "echo", "ran"});
    EXPECT_EQ(r.status, conflict);
    EXPECT_GE(std::chrono::steady_clock::now() - started, 300ms);  // never early
    EXPECT_NE(r.err.find("--wait 300ms"), std::string::npos) << r.err;
}

TEST(CliRun, WaitsForTheHolderAndThenRuns) {
    const auto name = dlock::test::unique_name("waits");
    holder held(name);
    cli_process waiter({"run", "--url", url(), name, "--", "echo", "ran"});
    // It waits registered among the mutex waiters: `dlock status` counts it as a waiter.
    EXPECT_TRUE(eventually(
        [&] {
            const auto r = run_cli({"status", "--json", "--url", url(), name});
            return r.status == 0 && nlohmann::json::parse(r.out)["waiters"] == 1;
        },
        10s));
    EXPECT_TRUE(waiter.running());
    held.release();
    const auto r = waiter.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "ran\n");
}

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

TEST(CliRun, WaitRidesOutAServerThatStopsAnswering) {
    // A server that does not answer (SIGSTOP: it accepts connections but replies to nothing):
    // within --wait, dlock tries again with back-off, and runs the command once it answers.
    dlock::test::redis_server server;
    const auto name = dlock::test::unique_name("stopped-server");
    server.pause();
    cli_process run(
        {"run", "--wait", ms(scaled(60s)), "--url", server.url(), name, "--", "echo", "ran"});
    const bool retried =
        eventually([&] { return run.err().find("trying again") != std::string::npos; }, 20s);
    server.resume();
    EXPECT_TRUE(retried) << run.err();
    const auto r = run.wait(60s);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "ran\n");
}

TEST(CliRun, WaitOnAnUnreachableServerSaysSoWith74Not75) {
    const std::string nobody = "redis://127.0.0.1:" + std::to_string(dlock::test::free_port());
    // Tried again until --wait runs out, then 74 (unreachable), not 75 (held by someone).
    auto r = run_cli(
        {"run", "--wait", "1s", "--connect-timeout", "100ms", "--url", nobody, "n", "--", "true"});
    EXPECT_EQ(r.status, unreachable) << r.err;
    EXPECT_NE(r.err.find("trying again until --wait 1.0s runs out"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("within --wait 1.0s)"), std::string::npos) << r.err;
    // --no-wait (and no --wait at all): one attempt, no retries.
    r = run_cli({"run", "--no-wait", "--url", nobody, "n", "--", "true"});
    EXPECT_EQ(r.status, unreachable) << r.err;
    EXPECT_EQ(r.err.find("trying again"), std::string::npos) << r.err;
    expect_one_line(r);
    // The timeouts apply to status too; a live server answers as usual.
    r = run_cli({"status", "--connect-timeout", "2s", "--command-timeout", "2s", "--url", url(),
                 dlock::test::unique_name("timeouts")});
    EXPECT_EQ(r.status, not_held) << r.err;
}

#if DLOCK_HAS_ZOOKEEPER
TEST(CliRun, CommandTimeoutIsRefusedOnZooKeeper) {
    const auto r = run_cli(
        {"run", "--command-timeout", "1s", "--url", "zk://127.0.0.1:1/x", "n", "--", "true"});
    EXPECT_EQ(r.status, usage) << r.err;
    EXPECT_NE(r.err.find("command timeout applies to Redis"), std::string::npos) << r.err;
    expect_one_line(r);
}
#endif

TEST(CliRun, RepeatedWarningsArePrintedOnceWithACount) {
    // The server dies mid-run: renewals fail every few milliseconds until the lease runs out.
    // Each identical warning is printed once, then counted, not repeated line after line.
    dlock::test::redis_server server;
    const auto name = dlock::test::unique_name("server-killed");
    const temp_dir dir("dlock-cli-markers");
    const auto lease = scaled(3s);
    cli_process run({"run", "--lease", ms(lease), "--url", server.url(), name, "--", "sh", "-c",
                     std::string("touch ") + (dir / "ready") + "; " + bounded_loop});
    ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir / "ready"); }, 10s))
        << run.err();
    server.kill9();
    const auto r = run.wait(30s);
    EXPECT_EQ(r.status, lock_lost) << r.err;
    // The full text once; its repeats as one count line each time another message (the stop,
    // the release) or the end interrupts them, and at most every 10 s while they last: a renewal
    // retry may still fail after the stop is printed, and that one is counted too.
    std::size_t first = 0, counts = 0, others = 0;
    for (const auto& line : lines_of(r.err)) {
        const bool renewal = line.find("renewal of") != std::string::npos;
        if (renewal && line.find("(repeated ") != std::string::npos) {
            ++counts;
        } else if (renewal) {
            ++first;
        } else if (first > 0) {
            ++others;
        }
    }
    EXPECT_EQ(first, 1u) << r.err;
    EXPECT_LE(counts, 1 + others + static_cast<std::size_t>(lease / 10s)) << r.err;
}

TEST(CliRun, SignalWhileWaitingGivesUp) {
    const auto name = dlock::test::unique_name("give-up");
    holder held(name);
    cli_process waiter({"run", "--url", url(), name, "--", "echo", "ran"});
    EXPECT_TRUE(eventually(
        [&] {
            const auto r = run_cli({"status", "--json", "--url", url(), name});
            return nlohmann::json::parse(r.out)["waiters"] == 1;
        },
        10s));
    waiter.send(SIGINT);
    const auto r = waiter.wait(10s);
    EXPECT_EQ(r.status, 128 + SIGINT);  // dies by the signal, as a shell expects
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("gave up"), std::string::npos) << r.err;
}

// --- a lost lock stops the command ------------------------------------------------------------

TEST(CliRun, LostLockStopsTheCommand) {
    const auto name = dlock::test::unique_name("lost");
    const temp_dir dir("dlock-cli-markers");
    const std::string script = "trap 'echo TERM > " + (dir / "term") + "; exit 0' TERM; touch " +
                               (dir / "ready") + "; " + bounded_loop;
    // A 1 s lease is renewed every ~333 ms, so the deletion is noticed quickly.
    cli_process run({"run", "--lease", "1s", "--url", url(), name, "--", "sh", "-c", script});
    ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir / "ready"); }, 10s))
        << run.err();
    EXPECT_EQ(shared_redis().command({"DEL", lock_key(name)}), "1");
    const auto r = run.wait(10s);
    EXPECT_EQ(r.status, lock_lost) << r.err;
    EXPECT_EQ(read_text(dir / "term"), "TERM\n");  // the command got SIGTERM
    EXPECT_NE(r.err.find("lost the lock"), std::string::npos) << r.err;
}

TEST(CliRun, LostLockKillsACommandThatIgnoresSigterm) {
    const auto name = dlock::test::unique_name("lost-kill");
    const temp_dir dir("dlock-cli-markers");
    const std::string script = "trap '' TERM; touch " + (dir / "ready") + "; " + bounded_loop;
    cli_process run({"run", "--lease", "1s", "--grace", "300ms", "--url", url(), name, "--", "sh",
                     "-c", script});
    ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir / "ready"); }, 10s))
        << run.err();
    const auto deleted = std::chrono::steady_clock::now();
    shared_redis().command({"DEL", lock_key(name)});
    const auto r = run.wait(10s);
    EXPECT_EQ(r.status, lock_lost) << r.err;
    EXPECT_GE(std::chrono::steady_clock::now() - deleted, 300ms);  // SIGKILL only after --grace
    EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
}

TEST(CliRun, MaxHoldStopsTheCommand) {
    const auto name = dlock::test::unique_name("max-hold");
    const auto started = std::chrono::steady_clock::now();
    const auto r = run_cli({"run", "--lease", "1s", "--max-hold", "800ms", "--url", url(), name,
                            "--", "sh", "-c", bounded_loop});
    // Its own status, like timeout(1)'s 124: not the 79 of a lost lock.
    EXPECT_EQ(r.status, max_hold) << r.err;
    EXPECT_GE(std::chrono::steady_clock::now() - started, 700ms);
    EXPECT_NE(r.err.find("--max-hold 800ms"), std::string::npos) << r.err;
}

// --- signals are passed on ----------------------------------------------------------------------

TEST(CliRun, ForwardsSignalsToTheCommand) {
    const auto name = dlock::test::unique_name("signals");
    const temp_dir dir("dlock-cli-markers");
    const auto log = dir / "log";
    const std::string script = "for s in INT HUP QUIT USR1 USR2; do trap \"echo $s >> " + log +
                               "\" $s; done; "
                               "trap 'echo TERM >> " +
                               log + "; exit 3' TERM; touch " + (dir / "ready") + "; " +
                               bounded_loop;
    cli_process run({"run", "--url", url(), name, "--", "sh", "-c", script});
    ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir / "ready"); }, 10s))
        << run.err();
    std::string expected;
    for (const auto& [sig, text] :
         {std::pair{SIGINT, "INT"}, std::pair{SIGHUP, "HUP"}, std::pair{SIGQUIT, "QUIT"},
          std::pair{SIGUSR1, "USR1"}, std::pair{SIGUSR2, "USR2"}}) {
        run.send(sig);
        expected += std::string(text) + "\n";
        EXPECT_TRUE(eventually([&] { return read_text(log) == expected; }, 5s))
            << "after " << text << ": " << read_text(log);
    }
    run.send(SIGTERM);
    const auto r = run.wait(10s);
    EXPECT_EQ(r.status, 3) << r.err;  // the command's own status
    EXPECT_EQ(read_text(log), expected + "TERM\n");
    EXPECT_EQ(shared_redis().command({"EXISTS", lock_key(name)}), "0");
}

TEST(CliRun, ForegroundCommandGetsSignalsToo) {
    const auto name = dlock::test::unique_name("foreground");
    const temp_dir dir("dlock-cli-markers");
    const std::string script = "trap 'exit 4' TERM; touch " + (dir / "ready") + "; " + bounded_loop;
    cli_process run({"run", "--foreground", "--url", url(), name, "--", "sh", "-c", script});
    ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir / "ready"); }, 10s))
        << run.err();
    run.send(SIGTERM);
    const auto r = run.wait(10s);
    EXPECT_EQ(r.status, 4) << r.err;
}

// --- people first: the waiting line -------------------------------------------------------------

TEST(CliRun, ShowsAWaitingLineOnlyOnATerminal) {
    const auto name = dlock::test::unique_name("tty");
    holder held(name);
    auto r = run_cli({"run", "--wait", "700ms", "--url", url(), name, "--", "true"},
                     {.tty_stderr = true});
    EXPECT_EQ(r.status, conflict);
    EXPECT_NE(r.err.find("waiting for \"" + name + "\""), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("holder's lease"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("\r\033[K"), std::string::npos) << r.err;  // erased in place

    r = run_cli({"run", "--quiet", "--wait", "300ms", "--url", url(), name, "--", "true"},
                {.tty_stderr = true});
    EXPECT_EQ(r.status, conflict);
    EXPECT_EQ(r.err.find("waiting for"), std::string::npos) << r.err;

    r = run_cli({"run", "--wait", "300ms", "--url", url(), name, "--", "true"});  // not a terminal
    EXPECT_EQ(r.status, conflict);
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("waiting for"), std::string::npos) << r.err;
}

// --- dlock status -------------------------------------------------------------------------------

TEST(CliStatus, FreeAndHeld) {
    const auto name = dlock::test::unique_name("status");
    // Scripts can ask "is it held?" as with `systemctl is-active`: 0 held, 3 not held.
    auto r = run_cli({"status", "--url", url(), name});
    EXPECT_EQ(r.status, not_held) << r.err;
    EXPECT_NE(r.out.find("free"), std::string::npos) << r.out;

    holder held(name);
    r = run_cli({"status", "--url", url(), name});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("held, lease"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::to_string(held.token()) + " (the last fencing token"),
              std::string::npos)
        << r.out;

    r = run_cli({"status", "--json", "--url", url(), name});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["name"], name);
    EXPECT_EQ(j["held"], true);
    EXPECT_GT(j["lease_remaining_ms"].get<long long>(), 0);
    EXPECT_LE(j["lease_remaining_ms"].get<long long>(), 10'000);
    EXPECT_EQ(j["fencing_counter"].get<std::uint64_t>(), held.token());
    EXPECT_EQ(j["subscribed_clients"], 0);
    EXPECT_EQ(j["keys"]["lock"], lock_key(name));

    held.release();
    r = run_cli({"status", "--json", "--url", url(), name});
    EXPECT_EQ(r.status, not_held) << r.err;
    const auto after = nlohmann::json::parse(r.out);
    EXPECT_EQ(after["held"], false);
    EXPECT_TRUE(after["lease_remaining_ms"].is_null());
}

TEST(CliStatus, NeverPrintsThePassword) {
    dlock::test::redis_server server({.extra_args = {"--requirepass", "s3cret"}});
    const std::string with_password = "redis://:s3cret@127.0.0.1:" + std::to_string(server.port());
    const auto r = run_cli({"status", "--json", "--url", with_password, "x"});
    EXPECT_EQ(r.status, not_held) << r.err;
    EXPECT_EQ(r.out.find("s3cret"), std::string::npos) << r.out;
}

/// `dlock status --json` as an object (fails the test on a status other than held/not held, or
/// one that disagrees with "held"). With the scaled connect timeout the etcd tests use: a gRPC
/// connection from a new process missed the default 2 s on a loaded machine.
nlohmann::json status_json(const std::string& u, const std::string& name) {
    const auto r = run_cli({"status", "--json", "--connect-timeout",
                            dlock::test::etcd_connect_timeout(), "--url", u, name});
    if (r.status != 0 && r.status != not_held) {
        ADD_FAILURE() << "dlock status exited " << r.status << ": " << r.err;
        return nlohmann::json::object();
    }
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(r.status == 0, j["held"] == true) << r.out;
    return j;
}

TEST(CliStatus, HeldSemaphore) {
    const auto name = dlock::test::unique_name("sem");
    dlock::redis::client redis({.url = url()});
    const auto grant =
        redis.acquire(name, {.kind = dlock::lock_kind::permits, .count = 2, .limit = 3}, {});
    auto r = run_cli({"status", "--url", url(), name});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("dlock::counting_semaphore"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("held: 2 of 3 permits in use (1 grant), lease"), std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("not a dlock lock"), std::string::npos) << r.out;
    const auto j = status_json(url(), name);
    EXPECT_EQ(j["type"], "counting_semaphore");
    EXPECT_EQ(j["held"], true);
    EXPECT_EQ(j["permits_in_use"], 2);
    EXPECT_EQ(j["permit_limit"], 3);
    EXPECT_EQ(j["fencing_counter"].get<std::uint64_t>(), grant.fencing_token());
}

TEST(CliStatus, NameReadersHold) {
    const auto name = dlock::test::unique_name("rw");
    dlock::redis::client redis({.url = url()});
    const auto r1 = redis.acquire(name, {.kind = dlock::lock_kind::read}, {});
    const auto r2 = redis.acquire(name, {.kind = dlock::lock_kind::read}, {});
    const auto r = run_cli({"status", "--url", url(), name});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("held by 2 readers, lease"), std::string::npos) << r.out;
    const auto j = status_json(url(), name);
    EXPECT_EQ(j["type"], "shared_mutex");
    EXPECT_EQ(j["held"], true);
    EXPECT_EQ(j["readers"], 2);
    EXPECT_EQ(j["writer"], false);
}

TEST(CliStatus, FairLockWithAQueuedWaiter) {
    const auto name = dlock::test::unique_name("fair");
    dlock::redis::client redis({.url = url()});
    auto grant = redis.acquire(name, {.kind = dlock::lock_kind::fair}, {});
    cli_process waiting({"run", "--fair", "--url", url(), name, "--", "true"});
    ASSERT_TRUE(eventually([&] { return status_json(url(), name)["waiters"] == 1; }, 10s))
        << waiting.err();
    const auto r = run_cli({"status", "--url", url(), name});
    EXPECT_NE(r.out.find("dlock::fair_mutex"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1 queued"), std::string::npos) << r.out;
    grant.release();
    EXPECT_EQ(waiting.wait(10s).status, 0);
    const auto j = status_json(url(), name);
    EXPECT_EQ(j["held"], false);
    EXPECT_EQ(j["waiters"], 0);
}

#if DLOCK_HAS_ZOOKEEPER
TEST(CliStatus, ZooKeeperLock) {
    const auto zk = dlock::test::shared_zk().url("/dlock-cli");
    const auto name = dlock::test::unique_name("zk");
    auto r = run_cli({"status", "--url", zk, name});
    EXPECT_EQ(r.status, not_held) << r.err;
    EXPECT_NE(r.out.find("state:               free"), std::string::npos) << r.out;

    dlock::zk::client holder({.url = zk});
    auto held = holder.acquire(name, {.wait = 10s});
    cli_process waiting({"run", "--url", zk, name, "--", "true"});
    ASSERT_TRUE(eventually([&] { return status_json(zk, name)["waiters"] == 1; }, 20s))
        << waiting.err();
    r = run_cli({"status", "--url", zk, name});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("held (while the holder's ZooKeeper session lives)"), std::string::npos)
        << r.out;
    const auto j = status_json(zk, name);
    EXPECT_EQ(j["backend"], "zookeeper");
    EXPECT_EQ(j["held"], true);
    EXPECT_EQ(j["type"], "exclusive");
    EXPECT_EQ(j["fencing_counter"].get<std::uint64_t>(), held.fencing_token());
    held.release();
    EXPECT_EQ(waiting.wait(20s).status, 0);
}
#endif

#if DLOCK_HAS_ETCD
TEST(CliStatus, EtcdSharedLock) {
    const auto etcd = dlock::test::shared_etcd().url();
    const auto name = dlock::test::unique_name("etcd-status");
    const auto etcd_ct = dlock::test::etcd_connect_timeout();
    auto r = run_cli({"status", "--connect-timeout", etcd_ct, "--url", etcd, name});
    EXPECT_EQ(r.status, not_held) << r.err;
    EXPECT_NE(r.out.find("state:               free"), std::string::npos) << r.out;

    dlock::etcd::client a({.url = etcd, .connect_timeout = scaled(10s)});
    dlock::etcd::client b({.url = etcd, .connect_timeout = scaled(10s)});
    auto r1 = a.acquire(name, {.kind = dlock::lock_kind::read}, {});
    auto r2 = b.acquire(name, {.kind = dlock::lock_kind::read}, {});
    // Another reader shares it (--shared); a writer (--write) queues behind the readers.
    r = run_cli({"run", "--connect-timeout", etcd_ct, "--shared", "--no-wait", "--url", etcd, name,
                 "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    cli_process writer(
        {"run", "--connect-timeout", etcd_ct, "--write", "--url", etcd, name, "--", "true"});
    ASSERT_TRUE(eventually([&] { return status_json(etcd, name)["waiters"] == 1; }, 20s))
        << writer.err();
    r = run_cli({"status", "--connect-timeout", etcd_ct, "--url", etcd, name});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("held by 2 readers (while the holder's etcd lease lives)"),
              std::string::npos)
        << r.out;
    const auto j = status_json(etcd, name);
    EXPECT_EQ(j["backend"], "etcd");
    EXPECT_EQ(j["type"], "shared_mutex");
    EXPECT_EQ(j["readers"], 2);
    EXPECT_EQ(j["fencing_counter"].get<std::uint64_t>(), r2.fencing_token());
    r1.release();
    r2.release();
    EXPECT_EQ(writer.wait(20s).status, 0);
}
#endif

// --- dlock demo ---------------------------------------------------------------------------------

/// The "oversold" row of the summary: {without a lock, with dlock}.
std::pair<long long, long long> oversold_row(const std::string& out) {
    for (const auto& line : lines_of(out)) {
        if (line.starts_with("oversold")) {
            std::istringstream in(line.substr(8));
            long long unlocked = -1, locked = -1;
            in >> unlocked >> locked;
            return {unlocked, locked};
        }
    }
    return {-1, -1};
}

TEST(CliDemo, OnAGivenServer) {
    const auto r = run_cli({"demo", "--url", url(), "--workers", "3", "--stock", "20"}, {}, 60s);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("with dlock"), std::string::npos) << r.out;
    EXPECT_EQ(oversold_row(r.out).second, 0) << r.out;
    // It leaves nothing behind on a server it was given.
    EXPECT_EQ(shared_redis().command({"KEYS", "dlock-demo*"}), "");
}

TEST(CliDemo, StartsItsOwnServer) {
    const auto r = run_cli({"demo", "--workers", "2", "--stock", "10"}, {}, 60s);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("Started redis-server"), std::string::npos) << r.out;
    EXPECT_EQ(oversold_row(r.out).second, 0) << r.out;
}

TEST(CliDemo, WithoutRedisServerInstalled) {
    const auto r = run_cli({"demo"}, {.env = {"PATH=/nonexistent"}});
    EXPECT_EQ(r.status, unavailable);
    EXPECT_NE(r.err.find("redis-server is not on PATH"), std::string::npos) << r.err;
    expect_one_line(r);
}

// --- Redlock: the same commands over a quorum of servers --------------------------------------

// --node-timeout vote_bound() for every Redlock run, status and demo here (cli_process.hpp).
class CliRedlock : public testing::Test {
protected:
    CliRedlock() {
        for (auto& s : servers_) s = std::make_unique<dlock::test::redis_server>();
    }
    std::string url() const {
        std::string u = "redlock://";
        for (const auto& s : servers_) {
            // Appended piecewise: building "," + std::string(...) first makes GCC 12 at -O3
            // report a false -Wrestrict.
            if (u.back() != '/') u += ',';
            u += "127.0.0.1:";
            u += std::to_string(s->port());
        }
        return u;
    }
    std::unique_ptr<dlock::test::redis_server> servers_[3];
};

TEST_F(CliRedlock, RunAndStatus) {
    const auto name = dlock::test::unique_name("redlock");
    const temp_dir dir("dlock-cli-markers");
    // Every server's counter above its clock in microseconds (the year 2128): the grant's token
    // is the next number on all of them (a token is max(counter + 1, the clock)).
    for (const auto& s : servers_) {
        dlock::redis::client server({.url = s->url()});
        server.command({"SET", server.fence_key(name), "5000000000000000"});
    }
    const std::string script = "echo $DLOCK_FENCING_TOKEN; touch " + (dir / "ready") + "; " +
                               "while [ ! -e " + (dir / "done") + " ]; do sleep 0.02; done";
    cli_process run(
        {"run", "--node-timeout", vote_bound(), "--url", url(), name, "--", "sh", "-c", script});
    ASSERT_TRUE(eventually([&] { return std::filesystem::exists(dir / "ready"); }, 10s))
        << run.err();

    auto r = run_cli({"status", "--node-timeout", vote_bound(), "--url", url(), name});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("held on 3 of 3 servers (quorum 2)"), std::string::npos) << r.out;
    r = run_cli({"status", "--json", "--node-timeout", vote_bound(), "--url", url(), name});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["backend"], "redlock");
    EXPECT_EQ(j["held"], true);
    EXPECT_EQ(j["quorum"], 2);
    EXPECT_EQ(j["servers"].size(), 3u);
    EXPECT_EQ(j["fencing_counter"], 5000000000000001);
    // Exclusion holds across the quorum.
    r = run_cli(
        {"run", "--no-wait", "--node-timeout", vote_bound(), "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, conflict) << r.err;

    std::ofstream(dir / "done").close();
    r = run.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "5000000000000001\n");
}

TEST_F(CliRedlock, NeedsAQuorumOfServers) {
    const auto name = dlock::test::unique_name("quorum");
    servers_[0]->stop();
    auto r = run_cli({"run", "--node-timeout", vote_bound(), "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;  // 2 of 3 is a quorum
    servers_[1]->stop();
    r = run_cli({"run", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, unreachable) << r.err;
    EXPECT_NE(r.err.find("no quorum"), std::string::npos) << r.err;
    expect_one_line(r);
}

// A degraded quorum is said: one warning line per run (-v names the server and why, never a
// password), and `dlock status` shows which servers answered and which did not.
TEST_F(CliRedlock, ADegradedQuorumIsSaidOncePerRun) {
    const auto name = dlock::test::unique_name("degraded");
    const auto down = "127.0.0.1:" + std::to_string(servers_[2]->port());
    servers_[2]->stop();
    const auto warnings = [](const std::string& err) {
        std::vector<std::string> out;
        for (const auto& line : lines_of(err))
            if (line.find("warning: Redlock is degraded") != std::string::npos) out.push_back(line);
        return out;
    };
    // The command outlives the first renewal (at a third of the lease), which fails on the
    // stopped server too.
    auto r = run_cli({"run", "--lease", "6s", "--node-timeout", vote_bound(), "--url", url(), name,
                      "--", "sleep", "2.5"});
    EXPECT_EQ(r.status, 0) << r.err;
    auto w = warnings(r.err);
    ASSERT_EQ(w.size(), 1u) << r.err;
    EXPECT_TRUE(w.front().starts_with("dlock: warning: ")) << w.front();
    EXPECT_NE(w.front().find("-v names it"), std::string::npos) << w.front();
    EXPECT_EQ(w.front().find(down), std::string::npos) << "only -v names the server";

    r = run_cli({"run", "-v", "--lease", "6s", "--node-timeout", vote_bound(), "--url", url(), name,
                 "--", "sleep", "2.5"});
    EXPECT_EQ(r.status, 0) << r.err;
    w = warnings(r.err);
    ASSERT_EQ(w.size(), 1u) << r.err;
    EXPECT_NE(w.front().find(down), std::string::npos) << w.front();
    EXPECT_NE(w.front().find("refused"), std::string::npos) << "the cause: " << w.front();

    r = run_cli({"status", "--node-timeout", vote_bound(), "--url", url(), name});
    EXPECT_EQ(r.err, "");
    EXPECT_NE(
        r.out.find("servers:             2 of 3 answered (degraded: redis://" + down + " did not"),
        std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("server redis://" + down), std::string::npos) << r.out;
    r = run_cli({"status", "--json", "--node-timeout", vote_bound(), "--url", url(), name});
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["answered_servers"], 2);
    EXPECT_TRUE(j["servers"][2].contains("error")) << r.out;
    servers_[2]->start();
    r = run_cli({"status", "--node-timeout", vote_bound(), "--url", url(), name});
    EXPECT_NE(r.out.find("servers:             all 3 answered"), std::string::npos) << r.out;
    r = run_cli({"run", "--node-timeout", vote_bound(), "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(warnings(r.err).empty()) << r.err;
}

// A server that refuses the client (another password than the others') degrades the quorum the
// same way; the password is never printed.
TEST(CliRedlockAuth, AServerRefusingAuthIsNamedWithoutThePassword) {
    const std::string password = "s3cret-pw";
    dlock::test::redis_server a({.extra_args = {"--requirepass", password}});
    dlock::test::redis_server b({.extra_args = {"--requirepass", password}});
    dlock::test::redis_server other({.extra_args = {"--requirepass", "another-pw"}});
    const auto refusing = "127.0.0.1:" + std::to_string(other.port());
    const auto u = "redlock://:" + password + "@127.0.0.1:" + std::to_string(a.port()) +
                   ",127.0.0.1:" + std::to_string(b.port()) + "," + refusing;
    const auto name = dlock::test::unique_name("auth");
    auto r = run_cli({"run", "-v", "--node-timeout", vote_bound(), "--url", u, name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    std::size_t warned = 0;
    for (const auto& line : lines_of(r.err)) {
        if (line.find("warning: Redlock is degraded") == std::string::npos) continue;
        ++warned;
        EXPECT_NE(line.find(refusing), std::string::npos) << line;
    }
    EXPECT_EQ(warned, 1u) << r.err;
    EXPECT_EQ(r.err.find(password), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find(password), std::string::npos) << r.out;
    r = run_cli({"status", "--url", u, name});
    EXPECT_NE(r.out.find("2 of 3 answered"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(password), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find(password), std::string::npos) << r.err;
}

TEST(CliDemoRedlock, StartsThreeServers) {
    const auto r = run_cli({"demo", "--backend", "redlock", "--node-timeout", vote_bound(),
                            "--workers", "2", "--stock", "10"},
                           {}, 60s);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("Started 3 redis-servers"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Redlock over 3 servers (quorum 2)"), std::string::npos) << r.out;
    EXPECT_EQ(oversold_row(r.out).second, 0) << r.out;
}

// --- every bad input: a documented status and one clear line ------------------------------------

struct bad_input {
    std::vector<std::string> args;
    int status;
    std::string message;  // a substring of the one line on stderr
};

TEST(CliBadInput, UsageErrors) {
    const std::string u = url();
    const std::vector<bad_input> cases = {
        {{}, usage, "missing command"},
        {{"bogus"}, usage, "unknown command \"bogus\""},
        {{"--bogus"}, usage, "unknown option --bogus"},
        {{"run", "--bogus", "n", "--", "true"}, usage, "unknown option --bogus"},
        {{"status", "n", "--bogus"}, usage, "unknown option --bogus"},
        {{"demo", "--bogus"}, usage, "unknown option --bogus"},
        {{"run"}, usage, "missing the lock NAME"},
        {{"run", "n"}, usage, "missing the COMMAND"},
        {{"run", "n", "--"}, usage, "missing the COMMAND"},
        {{"run", "--no-wait", "--"}, usage, "missing the lock NAME"},
        {{"run", "--", "n", "--"}, usage, "missing the COMMAND"},
        {{"run", "--connect-timeout", "0", "n", "--", "true"}, usage, "must be greater than zero"},
        {{"status", "--command-timeout", "soon", "n"}, usage, "--command-timeout \"soon\""},
        {{"run", "--node-timeout", "0", "n", "--", "true"}, usage, "must be greater than zero"},
        {{"status", "--node-timeout", "1x", "n"}, usage, "--node-timeout \"1x\""},
        {{"run", "--node-timeout", "1s", "--url", "redis://127.0.0.1:1", "n", "--", "true"},
         usage,
         "a node timeout applies to redlock:// only"},
        {{"set-permits", "--node-timeout", "1s", "--url", "redis://127.0.0.1:1", "n", "2"},
         usage,
         "a node timeout applies to redlock:// only"},
        {{"demo", "--node-timeout", "1s", "--url", "redis://127.0.0.1:1"},
         usage,
         "a node timeout applies to redlock:// only"},
        {{"demo", "--backend", "redlock", "--node-timeout", "0"},
         usage,
         "must be greater than zero"},
        // A dlock option after NAME is the command's word, and no command is named like that.
        {{"run", "n", "--url", "redis://h", "--", "true"}, usage, "options go before NAME"},
        {{"run", "n", "--url=redis://:pw@h", "true"}, usage, "COMMAND \"--url\" starts with"},
        {{"status"}, usage, "missing the lock NAME"},
        {{"run", "--wait", "10x", "n", "--", "true"}, usage, "--wait \"10x\": not a duration"},
        {{"run", "--wait", "-1s", "n", "--", "true"},
         usage,
         "--wait \"-1s\": must not be negative"},
        {{"run", "--wait", "", "n", "--", "true"}, usage, "--wait \"\": empty duration"},
        {{"run", "--lease", "1m30", "n", "--", "true"}, usage, "--lease \"1m30\": not a duration"},
        {{"run", "--lease", "5ms", "n", "--", "true"}, usage, "--lease \"5ms\": must be between"},
        {{"run", "--lease", "forever", "n", "--", "true"}, usage, "must be a finite duration"},
        {{"run", "--grace", "soon", "n", "--", "true"}, usage, "--grace \"soon\""},
        {{"run", "--max-hold", "0", "n", "--", "true"}, usage, "must be greater than zero"},
        {{"run", "--wait", "1s", "--no-wait", "n", "--", "true"}, usage, "cannot be combined"},
        {{"run", "-q", "-v", "n", "--", "true"}, usage, "cannot be combined"},
        {{"run", "--conflict-exit-code", "300", "n", "--", "true"}, usage, "between 0 and 255"},
        {{"run", "--conflict-exit-code", "x", "n", "--", "true"}, usage, "conflict-exit-code"},
        {{"run", "--url", "foo://h", "n", "--", "true"}, usage, "unknown scheme \"foo\""},
        {{"run", "--url", "localhost:6379", "n", "--", "true"}, usage, "URL \"localhost:6379\""},
        {{"run", "--url", "redis://127.0.0.1:99999", "n", "--", "true"}, usage, "99999"},
        {{"run", "--url", "", "n", "--", "true"}, usage, "empty URL"},
        {{"run", "--key-prefix", "a{b", "--url", u, "n", "--", "true"},
         usage,
         "key prefix \"a{b\""},
        {{"demo", "--workers", "0"}, usage, "--workers 0"},
        {{"demo", "--stock", "many"}, usage, "--stock"},
        {{"demo", "--backend", "memcached"}, usage, "--backend \"memcached\""},
        {{"demo", "--backend", "redlock", "--url", u}, usage, "does not match"},
        {{"run", "--url", "redlock://127.0.0.1:1,,127.0.0.1:2", "n", "--", "true"},
         usage,
         "empty server"},
        {{"run", "--url", "redlock://127.0.0.1:1,127.0.0.1:1", "n", "--", "true"},
         usage,
         "listed twice"},
    };
    for (const auto& c : cases) {
        const auto r = run_cli(c.args);
        std::string joined;
        for (const auto& a : c.args) joined += " '" + a + "'";
        EXPECT_EQ(r.status, c.status) << "dlock" << joined << "\n" << r.err;
        EXPECT_NE(r.err.find(c.message), std::string::npos)
            << "dlock" << joined << ": expected \"" << c.message << "\" in: " << r.err;
        expect_one_line(r);
    }
}

// --- dlock run: the lock kinds
// --------------------------------------------------------------------

TEST(CliLockKinds, FairRunsTheCommandAndLeavesNoQueue) {
    const auto name = dlock::test::unique_name("fair");
    const auto r = run_cli({"run", "--fair", "--url", url(), name, "--", "sh", "-c",
                            "test -n \"$DLOCK_FENCING_TOKEN\""});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(shared_redis().command({"EXISTS", lock_key(name), lock_key(name) + ":queue"}), "0");
}

TEST(CliLockKinds, SharedHoldersCoexistAndExcludeAWriter) {
    const auto name = dlock::test::unique_name("rw");
    dlock::redis::client redis({.url = url()});
    {
        const auto reader = redis.acquire(name, {.kind = dlock::lock_kind::read}, {.wait = 0s});
        auto r = run_cli({"run", "--shared", "--no-wait", "--url", url(), name, "--", "true"});
        EXPECT_EQ(r.status, 0) << "readers share: " << r.err;
        r = run_cli({"run", "--write", "--no-wait", "--url", url(), name, "--", "true"});
        EXPECT_EQ(r.status, conflict) << "a writer waits for the reader: " << r.err;
    }
    const auto r = run_cli({"run", "--write", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliLockKinds, PermitsBoundTheNumberOfHolders) {
    const auto name = dlock::test::unique_name("sem");
    dlock::redis::client redis({.url = url()});
    const dlock::lock_request one_of_two{.kind = dlock::lock_kind::permits, .count = 1, .limit = 2};
    auto first = redis.acquire(name, one_of_two, {.wait = 0s});
    auto r = run_cli({"run", "--permits", "2", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << "one permit of two is free: " << r.err;
    const auto second = redis.acquire(name, one_of_two, {.wait = 0s});
    r = run_cli({"run", "--permits", "2", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, conflict) << "both permits held: " << r.err;
    first.release();
    r = run_cli({"run", "--permits", "2", "--no-wait", "--url", url(), name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliLockKinds, OneKindPerRun) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"run", "--fair", "--shared", "--url", url(), "n", "--", "true"},
             {"run", "--write", "--permits", "2", "--url", url(), "n", "--", "true"},
             {"run", "--permits", "0", "--url", url(), "n", "--", "true"}}) {
        const auto r = run_cli(args);
        EXPECT_EQ(r.status, usage) << r.err;
        expect_one_line(r);
    }
}

#if DLOCK_HAS_ZOOKEEPER
TEST(CliZk, RunHoldsAZooKeeperLockWhileTheCommandRuns) {
    const auto zk = dlock::test::shared_zk().url("/dlock-cli");
    const auto name = dlock::test::unique_name("zk");
    auto r = run_cli({"run", "--url", zk, name, "--", "sh", "-c", "exit 7"});
    EXPECT_EQ(r.status, 7) << r.err;
    {
        // While another client holds it, a --no-wait run is a conflict.
        dlock::zk::client holder({.url = zk});
        auto held = holder.acquire(name, {.wait = 10s});
        r = run_cli({"run", "--no-wait", "--url", zk, name, "--", "echo", "ran"});
        EXPECT_EQ(r.status, conflict) << r.err;
        EXPECT_EQ(r.out, "");
    }
    r = run_cli({"run", "--shared", "--url", zk, name, "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
    const auto nobody = "zk://127.0.0.1:" + std::to_string(dlock::test::free_port()) + "/x";
    r = run_cli({"run", "--url", nobody, name, "--", "true"});
    EXPECT_EQ(r.status, 74) << r.err;
    expect_one_line(r);
}
#endif  // DLOCK_HAS_ZOOKEEPER

#if DLOCK_HAS_ETCD
TEST(CliEtcd, RunHoldsAnEtcdLockWithEtcdctlsVariables) {
    const auto etcd = dlock::test::shared_etcd().url();
    const auto name = dlock::test::unique_name("etcd");
    const auto etcd_ct = dlock::test::etcd_connect_timeout();
    auto r = run_cli({"run", "--connect-timeout", etcd_ct, "--url", etcd, name, "--", "sh", "-c",
                      "echo \"$ETCD_LOCK_KEY $ETCD_LOCK_REV $DLOCK_FENCING_TOKEN\"; exit 7"});
    EXPECT_EQ(r.status, 7) << r.err;
    std::istringstream words(r.out);
    std::string key, rev, token;
    words >> key >> rev >> token;
    EXPECT_EQ(key.rfind(name + "/", 0), 0u) << r.out;  // the key etcdctl lock NAME would hold
    EXPECT_EQ(rev, token) << r.out;
    EXPECT_FALSE(rev.empty()) << r.out;
    {
        // While another client holds it, a --no-wait run is a conflict.
        dlock::etcd::client holder({.url = etcd, .connect_timeout = scaled(10s)});
        auto held = holder.acquire(name, {.wait = 10s});
        r = run_cli({"run", "--connect-timeout", etcd_ct, "--no-wait", "--url", etcd, name, "--",
                     "echo", "ran"});
        EXPECT_EQ(r.status, conflict) << r.err;
        EXPECT_EQ(r.out, "");
    }
    for (const auto& refused : std::vector<std::vector<std::string>>{
             {"run", "--key-prefix", "p", "--url", etcd, name, "--", "true"},
             {"run", "--lease", "5s", "--url", etcd, name, "--", "true"}}) {
        r = run_cli(refused);
        EXPECT_EQ(r.status, unavailable) << refused[1] << "\n" << r.err;
        expect_one_line(r);
    }
    const auto nobody = "etcd://127.0.0.1:" + std::to_string(dlock::test::free_port());
    r = run_cli({"run", "--url", nobody, name, "--", "true"});
    EXPECT_EQ(r.status, 74) << r.err;
    expect_one_line(r);
}

// etcds://: --tls-ca trusts the test CA; without it the member is unreachable, with the cause.
TEST(CliEtcd, RunOverEtcdsWithTheCa) {
#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "gRPC's TLS credentials are freed on gRPC's uninstrumented threads, which TSan "
                    "reports as races (scripts/test.sh, the TSan stage)";
#endif
    const auto& certs = dlock::test::shared_tls_certs();
    dlock::test::etcd_tls tls;
    tls.ca = certs.ca();
    tls.cert = certs.cert("server");
    tls.key = certs.key("server");
    dlock::test::etcd_cluster etcd(1, {.tls = tls});
    const auto name = dlock::test::unique_name("etcds");
    const auto etcd_ct = dlock::test::etcd_connect_timeout();
    auto r = run_cli({"run", "--connect-timeout", etcd_ct, "--url", etcd.url(), "--tls-ca",
                      certs.ca(), name, "--", "sh", "-c", "test -n \"$ETCD_LOCK_KEY\" && exit 7"});
    EXPECT_EQ(r.status, 7) << r.err;
    r = run_cli({"run", "--connect-timeout", etcd_ct, "--url", etcd.url() + "?tls_ca=" + certs.ca(),
                 name, "--", "true"});
    EXPECT_EQ(r.status, ok) << r.err;
    r = run_cli({"run", "--connect-timeout", "1s", "--url", etcd.url(), name, "--", "true"});
    EXPECT_EQ(r.status, 74) << r.err;
    EXPECT_NE(r.err.find("unknown CA"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(etcd.endpoint(0)), std::string::npos) << r.err;
    expect_one_line(r);
    r = run_cli({"run", "--connect-timeout", etcd_ct, "--url", etcd.url(), "--tls-ca", certs.dir(),
                 name, "--", "true"});
    EXPECT_EQ(r.status, usage) << r.err;
    expect_one_line(r);
}

// etcd://user:@host with --password-file or $DLOCK_PASSWORD; a wrong password is 77 and never
// shown.
TEST(CliEtcd, RunAuthenticatesWithAPasswordFile) {
    dlock::test::etcd_cluster etcd(1);
    etcd.enable_auth("Cl1-pass");
    const auto url = "etcd://root:@" + etcd.endpoints();
    const auto name = dlock::test::unique_name("etcd-auth");
    const auto etcd_ct = dlock::test::etcd_connect_timeout();
    const auto file = "/tmp/dlock-etcd-pw." + std::to_string(::getpid());
    std::ofstream(file) << "Cl1-pass\n";
    std::filesystem::permissions(
        file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    auto r = run_cli({"run", "--connect-timeout", etcd_ct, "--url", url, "--password-file", file,
                      name, "--", "true"});
    EXPECT_EQ(r.status, ok) << r.err;
    r = run_cli({"run", "--connect-timeout", etcd_ct, "--url", url, name, "--", "true"},
                {.env = {"DLOCK_PASSWORD=Cl1-pass"}});
    EXPECT_EQ(r.status, ok) << r.err;
    r = run_cli({"run", "--connect-timeout", etcd_ct, "--url", url, name, "--", "true"},
                {.env = {"DLOCK_PASSWORD=Wr0ng-pass"}});
    EXPECT_EQ(r.status, 77) << r.err;
    EXPECT_EQ(r.err.find("Wr0ng-pass"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("\"root\""), std::string::npos) << r.err;
    expect_one_line(r);
    std::filesystem::remove(file);
}
#endif  // DLOCK_HAS_ETCD

TEST(CliBadInput, NotAvailableInThisBuild) {
    const std::string u = url();
    const std::vector<bad_input> cases = {
        {{"run", "--fair", "--url", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "n", "--",
          "true"},
         unavailable,
         "not available on Redlock"},
#if !DLOCK_HAS_ETCD
        {{"status", "--url", "etcd://127.0.0.1:2379", "n"}, unavailable, "etcd:// URLs"},
#endif
        {{"demo", "--backend", "zk"}, unavailable, "keeps its stock in Redis"},
    };
    for (const auto& c : cases) {
        const auto r = run_cli(c.args);
        EXPECT_EQ(r.status, c.status) << c.args[1] << " " << c.args[2] << "\n" << r.err;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
        expect_one_line(r);
    }
}

TEST(CliBadInput, UnreachableServer) {
    const std::string nobody = "redis://127.0.0.1:" + std::to_string(dlock::test::free_port());
    for (const auto& args :
         std::vector<std::vector<std::string>>{{"run", "--url", nobody, "n", "--", "true"},
                                               {"status", "--url", nobody, "n"},
                                               {"demo", "--url", nobody}}) {
        const auto r = run_cli(args);
        EXPECT_EQ(r.status, unreachable) << args[0] << ": " << r.err;
        EXPECT_NE(r.err.find("cannot reach the lock server at " + nobody), std::string::npos)
            << r.err;
        expect_one_line(r);
    }
}

TEST(CliBadInput, WrongOrMissingPassword) {
    dlock::test::redis_server server({.extra_args = {"--requirepass", "s3cret"}});
    const std::string port = std::to_string(server.port());
    for (const auto& u : {"redis://:wrong@127.0.0.1:" + port, "redis://127.0.0.1:" + port}) {
        const auto r = run_cli({"run", "--url", u, "n", "--", "true"});
        EXPECT_EQ(r.status, auth_failed) << u << ": " << r.err;
        EXPECT_NE(r.err.find("refused the credentials"), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("wrong@"), std::string::npos) << "password shown: " << r.err;
        expect_one_line(r);
    }
    // The right one works.
    const auto r =
        run_cli({"run", "--url", "redis://:s3cret@127.0.0.1:" + port, "n", "--", "true"});
    EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliBadInput, PasswordWithUrlDelimitersIsNeverPrinted) {
    // Unencoded '/', '?', '#', '@' in a password: refused or used, never printed, whole or in part.
    for (const std::string password : {"S3cr/etP4", "S3cr?etP4", "S3cr#etP4", "S3cr/etP4@kL8m"}) {
        for (const std::string& u :
             {"redis://:" + password + "@127.0.0.1:1",
              "redis://alice:" + password + "@127.0.0.1:1/0",
              "redlock://:" + password + "@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
              "redlock://:" + password + "@127.0.0.1:1,,127.0.0.1:2",
              "zk://u:" + password + "@127.0.0.1:1",
              "unix://:" + password + "@/tmp/dlock-none.sock"}) {
            for (const auto& args : std::vector<std::vector<std::string>>{
                     {"run", "--url", u, "n", "--", "true"}, {"status", "--url", u, "n"}}) {
                const auto r = run_cli(args);
                EXPECT_NE(r.status, 0) << u;
                for (const char* piece : {"S3cr", "etP4", "kL8m"}) {
                    EXPECT_EQ(r.err.find(piece), std::string::npos) << u << ": " << r.err;
                    EXPECT_EQ(r.out.find(piece), std::string::npos) << u << ": " << r.out;
                }
            }
        }
    }
}

TEST(CliBadInput, APasswordInTheUrlIsNotTakenForAUserName) {
    // "redis://S3cretPw@host" is a password without a user (as the library parses and redacts
    // it); a second password from the environment or a file is refused, never put next to the
    // first as "S3cretPw:...@", where messages would show the first as a user name.
    const std::string u = "redis://S3cretPw@127.0.0.1:" + std::to_string(shared_redis().port());
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"status", "--url", u, "n"}, {"run", "--url", u, "n", "--", "true"}}) {
        const auto r = run_cli(args, {.env = {"DLOCK_PASSWORD=0therPw"}});
        EXPECT_EQ(r.status, usage) << args[0] << ": " << r.err;
        EXPECT_NE(r.err.find("has a password already"), std::string::npos) << r.err;
        for (const char* piece : {"S3cret", "0ther"}) {
            EXPECT_EQ(r.err.find(piece), std::string::npos) << args[0] << ": " << r.err;
            EXPECT_EQ(r.out.find(piece), std::string::npos) << args[0] << ": " << r.out;
        }
        expect_one_line(r);
    }
    // A user name without a password takes one: "user:@host".
    const auto r =
        run_cli({"status", "--url",
                 "redis://default:@127.0.0.1:" + std::to_string(shared_redis().port()), "n"},
                {.env = {"DLOCK_PASSWORD=0therPw"}});
    EXPECT_NE(r.status, usage) << r.err;
    EXPECT_EQ(r.err.find("0ther"), std::string::npos) << r.err;
}

// --- help ---------------------------------------------------------------------------------------

TEST(CliHelp, EveryCommandHasHelpWithExamples) {
    auto r = run_cli({"--help"});
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("Examples:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Exit statuses"), std::string::npos) << r.out;
    for (const char* code : {" 64 ", " 69 ", " 74 ", " 75 ", " 77 ", " 79 ", "127 "}) {
        EXPECT_NE(r.out.find(code), std::string::npos) << code << " missing in --help";
    }
    EXPECT_EQ(r.out.find("__demo-worker"), std::string::npos);  // internal, hidden
    for (const char* cmd : {"run", "status", "demo"}) {
        r = run_cli({cmd, "--help"});
        EXPECT_EQ(r.status, 0) << cmd;
        EXPECT_NE(r.out.find("Usage: dlock " + std::string(cmd)), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("Examples:"), std::string::npos) << r.out;
    }
    r = run_cli({"--version"});
    EXPECT_EQ(r.status, 0);
    EXPECT_TRUE(r.out.starts_with("dlock ")) << r.out;
}

// `dlock --version` names the CLI's version, the library's (of the shared library it runs with)
// and the backends compiled in, so a bug report says what was running.
TEST(CliHelp, VersionNamesTheLibraryAndItsBackends) {
    std::string backends;
#if DLOCK_HAS_REDIS
    backends += "redis, redlock";
#endif
#if DLOCK_HAS_ZOOKEEPER
    backends += backends.empty() ? "zookeeper" : ", zookeeper";
#endif
#if DLOCK_HAS_ETCD
    backends += backends.empty() ? "etcd" : ", etcd";
#endif
    const std::string version = DLOCK_TEST_PROJECT_VERSION;  // project(dlock VERSION ...)
    const auto r = run_cli({"--version"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out,
              "dlock " + version + " (library " + version + "; backends: " + backends + ")\n");
    EXPECT_EQ(r.err, "");
}

}  // namespace
