// The benchmark worker speaks the worker protocol of docs/benchmarks.md (command line, life, file
// format): run the real dlock-bench-worker binary as separate processes against the shared
// redis-server and check what an outside analyser relies on. Speed is not asserted here (bench/
// measures it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"
#include "tls_certs.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using dlock::test::temp_dir;
namespace fs = std::filesystem;
using nlohmann::json;

const std::string worker_path = DLOCK_BENCH_WORKER;

std::int64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// One worker process (or another bench program): stdin /dev/null, stdout+stderr to `log`.
class worker_process {
public:
    worker_process(const std::vector<std::string>& args, const fs::path& log,
                   const std::string& program = worker_path) {
        std::vector<char*> argv;
        argv.push_back(const_cast<char*>(program.c_str()));
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        const int rc = ::posix_spawn(&pid_, program.c_str(), &fa, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) throw std::runtime_error("posix_spawn " + program + ": " + std::strerror(rc));
    }
    ~worker_process() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }
    worker_process(const worker_process&) = delete;
    worker_process& operator=(const worker_process&) = delete;

    /// Exit code (128 + signal if killed); kills the process and returns -1 after `timeout`.
    int wait(std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + dlock::test::scaled(timeout);
        for (;;) {
            int status = 0;
            const pid_t r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_) {
                pid_ = -1;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            if (r < 0 && errno != EINTR) return -1;
            if (std::chrono::steady_clock::now() >= deadline) {
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &status, 0);
                pid_ = -1;
                return -1;
            }
            std::this_thread::sleep_for(5ms);
        }
    }

private:
    pid_t pid_ = -1;
};

int run_worker(const std::vector<std::string>& args, const fs::path& log) {
    worker_process p(args, log);
    return p.wait(30s);
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A lock name in the protocol's alphabet [A-Za-z0-9:_.-], unique per test and process.
std::string protocol_key() {
    auto k = dlock::test::unique_name("bench");
    std::replace(k.begin(), k.end(), '/', '.');
    return k;
}

std::string servers() { return "127.0.0.1:" + std::to_string(dlock::test::shared_redis().port()); }

struct worker_file {
    std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> cycles;  // acq, rel, wait_ns
    json done;
    bool late = false;
};

/// Checks §4 line by line for worker `w` and fills `out` with its records.
void check_file(const fs::path& path, int w, worker_file& out) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    std::string line;
    int done_records = 0;
    int line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        SCOPED_TRACE(path.string() + ":" + std::to_string(line_no) + ": " + line);
        EXPECT_EQ(done_records, 0) << "the done record must be last";
        json rec;
        try {
            rec = json::parse(line);
        } catch (const json::parse_error& e) {
            ADD_FAILURE() << "not JSON: " << e.what();
            continue;
        }
        ASSERT_TRUE(rec.is_object());
        ASSERT_TRUE(rec.contains("w") && rec["w"].is_number_integer());
        EXPECT_EQ(rec["w"].get<int>(), w);
        if (rec.contains("event")) {
            ASSERT_TRUE(rec["event"].is_string());
            if (rec["event"] == "done") {
                ++done_records;
                out.done = rec;
            } else if (rec["event"] == "late_start") {
                out.late = true;
                EXPECT_TRUE(rec["late_ns"].is_number_integer());
            }
            continue;
        }
        for (const char* field : {"acq", "rel", "wait_ns"}) {
            ASSERT_TRUE(rec.contains(field)) << field;
            ASSERT_TRUE(rec[field].is_number_integer()) << field << " must be a JSON integer";
        }
        const auto acq = rec["acq"].get<std::int64_t>();
        const auto rel = rec["rel"].get<std::int64_t>();
        const auto wait = rec["wait_ns"].get<std::int64_t>();
        EXPECT_LE(acq, rel);
        EXPECT_GE(wait, 0);
        out.cycles.emplace_back(acq, rel, wait);
    }
    EXPECT_EQ(done_records, 1) << "exactly one done record";
    if (done_records == 1) {
        EXPECT_TRUE(out.done["cycles"].is_number_integer());
        EXPECT_EQ(out.done["cycles"].get<std::size_t>(), out.cycles.size());
        EXPECT_TRUE(out.done["errors"].is_number_integer());
        EXPECT_TRUE(out.done["lib_retries"].is_number_integer());
    }
}

/// Two workers of `mode` on one key for 0.3 s: both files follow the protocol and, for an
/// exclusive lock type, no interval overlaps one of the other worker.
/// "w<w><suffix>": appended, not "w" + string, because that prepend makes GCC 12 at -O3 report a
/// false -Wrestrict.
std::string worker_file_name(int w, const char* suffix) {
    std::string name = "w";
    name += std::to_string(w);
    name += suffix;
    return name;
}

void two_workers_on_one_key(const std::string& mode, bool exclusive) {
    SCOPED_TRACE("mode " + mode);
    const temp_dir dir("dlock-bench-test");
    const auto key = protocol_key();
    const auto start_at = monotonic_ns() + dlock::test::scaled(700ms).count() * 1'000'000;
    std::vector<std::unique_ptr<worker_process>> workers;
    for (int w = 0; w < 2; ++w) {
        workers.push_back(std::make_unique<worker_process>(
            std::vector<std::string>{"--mode", mode, "--key", key, "--duration-s", "0.3",
                                     "--worker-id", std::to_string(w), "--out",
                                     dir / worker_file_name(w, ".jsonl"), "--servers", servers(),
                                     "--cs-us", "20", "--ttl-ms", "10000", "--start-at-ns",
                                     std::to_string(start_at)},
            dir / worker_file_name(w, ".log")));
    }
    for (int w = 0; w < 2; ++w) {
        EXPECT_EQ(workers[w]->wait(30s), 0) << read_file(dir / worker_file_name(w, ".log"));
    }

    std::vector<std::tuple<std::int64_t, std::int64_t, int>> intervals;  // acq, rel, worker
    for (int w = 0; w < 2; ++w) {
        const auto file = dir / worker_file_name(w, ".jsonl");
        EXPECT_FALSE(fs::exists(file + ".tmp")) << "FILE.tmp must be renamed to FILE";
        worker_file f;
        check_file(file, w, f);
        for (const auto& [acq, rel, wait] : f.cycles) {
            intervals.emplace_back(acq, rel, w);
            // The loop starts at --start-at-ns (§3); a late worker says so in a late_start event.
            if (!f.late) {
                EXPECT_GE(acq - wait, start_at);
            }
        }
    }
    EXPECT_GE(intervals.size(), 2u) << "0.3 s should give the two workers some cycles";

    // Mutual exclusion: no interval overlaps one of the other worker (§5).
    std::sort(intervals.begin(), intervals.end());
    std::int64_t max_rel = INT64_MIN;
    int max_w = -1;
    int overlaps = 0;
    for (const auto& [acq, rel, w] : intervals) {
        if (max_w >= 0 && acq < max_rel && max_w != w) ++overlaps;
        if (rel > max_rel) {
            max_rel = rel;
            max_w = w;
        }
    }
    if (exclusive) {
        EXPECT_EQ(overlaps, 0);
    }
}

TEST(BenchWorker, TwoWorkersOnOneKeyWriteProtocolFiles) { two_workers_on_one_key("mutex", true); }

TEST(BenchWorker, EveryLockTypeOfTheFamilyRunsTheProtocol) {
    two_workers_on_one_key("fair", true);
    two_workers_on_one_key("reentrant", true);
    two_workers_on_one_key("semaphore", true);  // one permit
    two_workers_on_one_key("shared", false);    // read locks: overlaps are allowed
}

TEST(BenchWorker, OpsStopsAfterThatManyCycles) {
    const temp_dir dir("dlock-bench-test");
    const auto out = dir / "w.jsonl";
    EXPECT_EQ(run_worker({"--ops", "7", "--key", protocol_key(), "--out", out, "--servers",
                          servers(), "--worker-id", "3"},
                         dir / "w.log"),
              0)
        << read_file(dir / "w.log");
    worker_file f;
    check_file(out, 3, f);
    EXPECT_EQ(f.cycles.size(), 7u);
    EXPECT_EQ(f.done["errors"], 0);
}

TEST(BenchWorker, TlsCaMakesItUseRediss) {
    const dlock::test::tls_certs certs;
    const dlock::test::redis_server server({.tls_dir = certs.dir()});
    const temp_dir dir("dlock-bench-test");
    const auto out = dir / "w.jsonl";
    EXPECT_EQ(run_worker({"--ops", "3", "--key", protocol_key(), "--out", out, "--servers",
                          "127.0.0.1:" + std::to_string(server.tls_port()), "--tls-ca", certs.ca()},
                         dir / "w.log"),
              0)
        << read_file(dir / "w.log");
    worker_file f;
    check_file(out, 0, f);
    EXPECT_EQ(f.cycles.size(), 3u);
    EXPECT_EQ(f.done["errors"], 0);
}

TEST(BenchWorker, UnknownModeExits64) {
    const temp_dir dir("dlock-bench-test");
    const auto out = dir / "w.jsonl";
    EXPECT_EQ(run_worker({"--mode", "no-such-lock", "--key", protocol_key(), "--duration-s", "0.1",
                          "--out", out, "--servers", servers()},
                         dir / "w.log"),
              64);
    EXPECT_FALSE(fs::exists(out));
    EXPECT_NE(read_file(dir / "w.log").find("mutex"), std::string::npos)
        << "the message lists the available modes";
}

TEST(BenchWorker, PlannedButUnavailableModeExits64) {
    // A mode --help lists as planned (a lock type not built yet) is refused like an unknown one.
    const temp_dir dir("dlock-bench-test");
    ASSERT_EQ(run_worker({"--help"}, dir / "help.txt"), 0);
    const auto help = read_file(dir / "help.txt");
    const auto section = help.find("Planned (");
    if (section == std::string::npos) GTEST_SKIP() << "every planned lock type exists now";
    const auto name_at = help.find("\n  ", section) + 3;
    const auto planned = help.substr(name_at, help.find(' ', name_at) - name_at);
    EXPECT_EQ(run_worker({"--mode", planned, "--key", protocol_key(), "--duration-s", "0.1",
                          "--out", dir / "w.jsonl", "--servers", servers()},
                         dir / "w.log"),
              64)
        << planned;
}

TEST(BenchWorker, MissingOutExits64) {
    const temp_dir dir("dlock-bench-test");
    EXPECT_EQ(run_worker({"--mode", "mutex", "--key", protocol_key(), "--duration-s", "0.1",
                          "--servers", servers()},
                         dir / "w.log"),
              64);
}

TEST(BenchWorker, BadValuesExit64) {
    const temp_dir dir("dlock-bench-test");
    const auto out = dir / "w.jsonl";
    EXPECT_EQ(run_worker({"--key", "bad key", "--duration-s", "0.1", "--out", out}, dir / "a.log"),
              64);
    EXPECT_EQ(run_worker({"--key", "k", "--duration-s", "soon", "--out", out}, dir / "b.log"), 64);
    EXPECT_EQ(run_worker({"--key", "k", "--duration-s", "0.1", "--out", out, "--bogus", "1"},
                         dir / "c.log"),
              64);
    EXPECT_FALSE(fs::exists(out));
}

TEST(BenchWorker, HelpListsTheAvailableModes) {
    const temp_dir dir("dlock-bench-test");
    EXPECT_EQ(run_worker({"--help"}, dir / "help.txt"), 0);
    const auto help = read_file(dir / "help.txt");
    EXPECT_NE(help.find("Modes available in this build:\n  mutex"), std::string::npos) << help;
    EXPECT_NE(help.find("--start-at-ns"), std::string::npos);
}

// --- dlock-bench-floor's hand-off floor (--relay-s) ---------------------------------------------

/// The records of a floor file by event ("relay", "relay_procs") or by what ("relay_handoff",
/// "redis_ping").
std::map<std::string, json> floor_records(const std::string& path) {
    std::map<std::string, json> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        const auto rec = json::parse(line);
        if (rec.contains("what")) out[rec["what"].get<std::string>()] = rec;
        const auto event = rec.value("event", "");
        if (event == "relay" || event == "relay_procs") out[event] = rec;
    }
    return out;
}

/// The held share of a relay of 3 members holding the turn 200 µs each ("relay", "relay_procs").
void expect_held_share(const std::map<std::string, json>& recs, const std::string& event,
                       const std::string& out) {
    ASSERT_EQ(recs.count(event), 1u) << event << "\n" << read_file(out);
    EXPECT_EQ(recs.at(event)["workers"], 3);
    EXPECT_EQ(recs.at(event)["cs_us"], 200);
    const auto held = recs.at(event)["held_fraction"].get<double>();
    EXPECT_GT(held, 0.0);
    EXPECT_LE(held, 1.0);
}

/// A relay's hand-offs (`what`): 0.5 s of turns is far more than 10 even on a loaded machine.
void expect_handoffs(const std::map<std::string, json>& recs, const std::string& what,
                     const std::string& out) {
    ASSERT_EQ(recs.count(what), 1u) << what << "\n" << read_file(out);
    EXPECT_GE(recs.at(what)["n"].get<long long>(), 10) << what;
    EXPECT_GT(recs.at(what)["p50_ns"].get<long long>(), 0) << what;
}

// Three threads pass the turn around their ring for 0.5 s, each holding it 200 µs: every hand-off
// is recorded and the held share is what the turns held of the window.
TEST(BenchFloor, TheRelayPassesTheTurnAroundTheRing) {
    const temp_dir dir("dlock-bench-test");
    const auto out = dir / "floor.jsonl";
    worker_process floor({"--servers", servers(), "--out", out, "--duration-s", "0.1", "--relay-s",
                          "0.5", "--relay-workers", "3", "--relay-cs-us", "200"},
                         dir / "floor.log", DLOCK_BENCH_FLOOR);
    ASSERT_EQ(floor.wait(30s), 0) << read_file(dir / "floor.log");
    const auto recs = floor_records(out);
    expect_held_share(recs, "relay", out);
    expect_handoffs(recs, "relay_handoff", out);
    EXPECT_EQ(recs.count("redis_ping"), 1u);  // and the floor's own summary
}

// With --relay-quorum 3, two more relays with an empty critical section: on the first server and
// on all three, the turn taken at 2 of 3 messages. Each records its hand-offs; the relay itself
// fails (exit 1) if a turn is taken twice or out of order, e.g. on a late third copy.
TEST(BenchFloor, TheQuorumRelayTakesTheTurnAtAMajorityOfServers) {
    const temp_dir dir("dlock-bench-test");
    const dlock::test::redis_server second, third;
    const auto out = dir / "floor.jsonl";
    worker_process floor({"--servers",
                          servers() + ",127.0.0.1:" + std::to_string(second.port()) +
                              ",127.0.0.1:" + std::to_string(third.port()),
                          "--out", out, "--duration-s", "0.1", "--relay-s", "0.5",
                          "--relay-workers", "3", "--relay-cs-us", "200", "--relay-quorum", "3"},
                         dir / "floor.log", DLOCK_BENCH_FLOOR);
    ASSERT_EQ(floor.wait(30s), 0) << read_file(dir / "floor.log");
    const auto recs = floor_records(out);
    for (const char* what : {"relay_handoff", "relay_handoff_1of1", "relay_handoff_2of3"})
        expect_handoffs(recs, what, out);
}

// With --relay-procs 1 the relays the hand-off rows are judged by run again with a process per
// member (W4's, the least scripts' on one server), and with --relay-scale N,... the least
// scripts' between N processes (N = --relay-workers is the one-server relay's record again): each
// records its hand-offs, and a member process that fails, or whose figures do not reach the parent,
// fails the run.
TEST(BenchFloor, TheRelaysRunAgainBetweenProcesses) {
    const temp_dir dir("dlock-bench-test");
    const auto out = dir / "floor.jsonl";
    worker_process floor({"--servers", servers(), "--out", out, "--duration-s", "0.1", "--relay-s",
                          "0.5", "--relay-workers", "3", "--relay-cs-us", "200", "--relay-scripts",
                          "1", "--relay-procs", "1", "--relay-scale", "2,3,4"},
                         dir / "floor.log", DLOCK_BENCH_FLOOR);
    ASSERT_EQ(floor.wait(60s), 0) << read_file(dir / "floor.log");
    const auto recs = floor_records(out);
    expect_held_share(recs, "relay_procs", out);
    for (const char* what :
         {"relay_handoff_procs", "relay_handoff_min_scripts_procs",
          "relay_handoff_min_scripts_procs_2", "relay_handoff_min_scripts_procs_3",
          "relay_handoff_min_scripts_procs_4"})
        expect_handoffs(recs, what, out);
}

TEST(BenchFloor, BadRelayOptionsAreUsageErrors) {
    const temp_dir dir("dlock-bench-test");
    for (const std::vector<std::string>& bad :
         {std::vector<std::string>{"--relay-s", "0.1", "--relay-workers", "1"},
          {"--relay-s", "-1"},
          {"--relay-s", "0.1", "--relay-cs-us", "-5"},
          {"--relay-s", "0.1", "--gap-ms", "5"},
          {"--relay-s", "0.1", "--relay-quorum", "3"},  // one server only
          {"--relay-quorum", "2"},
          {"--relay-procs", "1"},  // no --relay-s
          {"--relay-s", "0.1", "--relay-procs", "2"},
          {"--relay-s", "0.1", "--relay-scripts", "1", "--relay-scale", "8"},  // no --relay-procs
          {"--relay-s", "0.1", "--relay-scripts", "1", "--relay-procs", "1", "--relay-scale", "1"},
          {"--relay-s", "0.1", "--relay-scripts", "1", "--relay-procs", "1", "--relay-scale",
           "8,,64"}}) {
        std::vector<std::string> args{"--servers", servers(), "--out", dir / "never.jsonl"};
        args.insert(args.end(), bad.begin(), bad.end());
        worker_process floor(args, dir / "floor.log", DLOCK_BENCH_FLOOR);
        EXPECT_EQ(floor.wait(10s), 64) << bad[0] << " " << bad[1];
        EXPECT_NE(read_file(dir / "floor.log").find("usage"), std::string::npos);
        EXPECT_FALSE(fs::exists(dir / "never.jsonl"));
    }
}

}  // namespace
