// dlock-bench-floor-zk: workload W0's ZooKeeper half, the floor of any ZooKeeper lock.
//
// The same idea as dlock-bench-floor (bench/floor.cpp) for ZooKeeper: the thinnest client there
// is from C/C++ (libzookeeper_mt's synchronous API, one session, one handle) against a server on
// loopback, after a warm-up, each round trip timed with CLOCK_MONOTONIC. It talks to ZooKeeper
// directly on purpose: it measures the machine and the server, not dlock. Note that the _mt
// client's sync calls are not a bare write(2)/read(2): the caller queues the request and sleeps,
// the library's I/O thread sends it and reads the reply, its completion thread wakes the caller.
// Those hand-offs are part of every C/C++ ZooKeeper client built on it, so part of the floor.
//
//   dlock-bench-floor-zk --servers HOST:PORT[,...] --out FILE [--duration-s S] [--max-ops N]
//                        [--warmup-s S] [--block-ms B] [--connect-timeout-ms T] [--session-ms T]
//                        [--zk-log off|error|warn|info|debug] [--gap-ms G] [--start-at-ns T]
//
// --servers is a ZooKeeper connect string (one server, or an ensemble). Operations timed:
//   zk_exists         zoo_exists("/"): a read, answered by the server it reaches without a quorum
//                     round (the floor of a ZooKeeper read)
//   zk_create         zoo_create of an EPHEMERAL_SEQUENTIAL node with a 32-byte value under "/":
//                     a write, i.e. a transaction the server logs (and, with forceSync=yes, its
//                     default, fsyncs) before it answers; what a lock recipe's acquire costs at
//                     least
//   zk_delete         zoo_delete of that node: the release's write
//   zk_create_delete  the two together, from before the create to after the delete: the minimum of
//                     one ZooKeeper lock cycle (a real recipe adds at least a getChildren)
// Reads and writes run in alternating blocks of --block-ms (default 100): reads only, then
// create+delete pairs only, and so on, so that both see the same machine load while a read seldom
// follows a write (on the 2-core test machine, a read issued right after each write took 1.1-1.5x
// as long as one among reads only: that is part of a lock recipe's cost, not of the floor).
// The loop stops after --duration-s seconds (default 3) or --max-ops operations of each kind.
// Before it, --warmup-s seconds (default 5) of the same blocks are run and not recorded, for the
// server's JIT: in runs here a read got 1.3-3x faster over the server's first 20,000-40,000
// requests.
//
// --gap-ms G > 0 is the probe instead: the round trip UNDER a workload's load, from a separate
// process while the workload runs (bench/run, docs/benchmarks.md), as dlock-bench-floor-etcd's.
// One operation every G ms on a fixed schedule (stats.hpp's pacer), a create of the probe's own
// node, a zoo_exists("/") and the delete of that node in turn, for --duration-s seconds, with no
// warm-up; --start-at-ns T (CLOCK_MONOTONIC, the workers' --start-at-ns) makes the timed
// operations start at T, after connecting. Its nodes, /dlock-floor-zk-probe-<pid>-<seq>, are
// outside any lock's path. The delete is the figure: it is the holder's release of a hand-off,
// and the server fires the next waiter's watch as it commits it. FILE then gets the zk_create
// and zk_exists samples and summaries, and the zk_delete "done" record last.
//
// FILE gets JSON Lines: one {"what":W,"rtt_ns":N} per operation (for CDF plots), one
// {"event":"summary","what":W,"client":..,"n":..,"p50_ns":..,"p90_ns":..,"p99_ns":..,"max_ns":..,
// "mean_ns":..} for zk_create, zk_delete and zk_create_delete, and the read floor's summary
// {"event":"done","what":"zk_exists",...} last (the same records dlock-bench-floor writes).
// Percentiles are nearest-rank, as in the Figures section of docs/benchmarks.md. Integers are
// nanoseconds.
//
// Exit status: 0 when FILE was written; 1 when the server cannot be reached within
// --connect-timeout-ms (default 10000) or an operation fails; 64 for bad arguments.
#include <time.h>
#include <zookeeper/zookeeper.h>
#include <zookeeper/zookeeper_version.h>

#include "stats.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

namespace {

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "dlock-bench-floor-zk: %s\n"
                 "usage: dlock-bench-floor-zk --servers HOST:PORT[,...] --out FILE "
                 "[--duration-s S] [--max-ops N] [--warmup-s S] [--block-ms B] "
                 "[--connect-timeout-ms T] [--session-ms T] [--zk-log off|error|warn|info|debug] "
                 "[--gap-ms G] [--start-at-ns T]\n",
                 why);
    std::exit(64);
}

const char* state_name(int state) {
    if (state == ZOO_CONNECTED_STATE) return "connected";
    if (state == ZOO_CONNECTING_STATE) return "connection lost, reconnecting";
    if (state == ZOO_ASSOCIATING_STATE) return "associating";
    if (state == ZOO_EXPIRED_SESSION_STATE) return "session expired";
    if (state == ZOO_AUTH_FAILED_STATE) return "authentication failed";
    if (state == ZOO_READONLY_STATE) return "read-only";
    if (state == ZOO_NOTCONNECTED_STATE) return "not connected";
    if (state == 0) return "no server has answered";
    return "unknown";
}

/// The session state as the library's completion thread reports it to the global watcher.
struct session {
    std::mutex m;
    std::condition_variable cv;
    int state = 0;  // guarded by m
};

void on_event(zhandle_t*, int type, int state, const char*, void* ctx) {
    if (type != ZOO_SESSION_EVENT || ctx == nullptr) return;
    auto* s = static_cast<session*>(ctx);
    {
        std::lock_guard lk(s->m);
        s->state = state;
    }
    s->cv.notify_all();
}

bool parse_log_level(std::string_view v, ZooLogLevel& out) {
    // Level 0 turns the library's stderr log off (zk_log.c: "disable logging").
    if (v == "off")
        out = static_cast<ZooLogLevel>(0);
    else if (v == "error")
        out = ZOO_LOG_LEVEL_ERROR;
    else if (v == "warn")
        out = ZOO_LOG_LEVEL_WARN;
    else if (v == "info")
        out = ZOO_LOG_LEVEL_INFO;
    else if (v == "debug")
        out = ZOO_LOG_LEVEL_DEBUG;
    else
        return false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    std::string servers;
    std::string out;
    double duration_s = 3.0;
    long long max_ops = 1'000'000;
    double warmup_s = 5.0;
    long long block_ms = 100;
    long long connect_timeout_ms = 10'000;
    long long session_ms = 10'000;
    ZooLogLevel log_level = static_cast<ZooLogLevel>(0);
    double gap_ms = 0;          // > 0: the probe (paced create, exists and delete, no blocks)
    long long start_at_ns = 0;  // > 0: the probe's timed operations start then
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--help") usage("help");
        if (i + 1 >= argc) usage("option without value");
        const std::string_view v = argv[++i];
        if (a == "--servers")
            servers = v;
        else if (a == "--out")
            out = v;
        else if (a == "--duration-s")
            duration_s = std::atof(std::string(v).c_str());
        else if (a == "--max-ops")
            max_ops = std::atoll(std::string(v).c_str());
        else if (a == "--warmup-s")
            warmup_s = std::atof(std::string(v).c_str());
        else if (a == "--block-ms")
            block_ms = std::atoll(std::string(v).c_str());
        else if (a == "--connect-timeout-ms")
            connect_timeout_ms = std::atoll(std::string(v).c_str());
        else if (a == "--session-ms")
            session_ms = std::atoll(std::string(v).c_str());
        else if (a == "--gap-ms")
            gap_ms = std::atof(std::string(v).c_str());
        else if (a == "--start-at-ns")
            start_at_ns = std::atoll(std::string(v).c_str());
        else if (a == "--zk-log") {
            if (!parse_log_level(v, log_level))
                usage("--zk-log takes off, error, warn, info or debug");
        } else
            usage("unknown option");
    }
    if (servers.empty() || out.empty() || servers.find(':') == std::string::npos)
        usage("--servers HOST:PORT[,...] and --out are required");
    if (duration_s <= 0 || max_ops <= 0 || warmup_s < 0 || block_ms <= 0 ||
        connect_timeout_ms <= 0 || session_ms <= 0 || session_ms > 1'000'000)
        usage(
            "--duration-s, --max-ops, --block-ms, --connect-timeout-ms and --session-ms must be > "
            "0, --warmup-s >= 0");
    if (gap_ms < 0 || start_at_ns < 0) usage("--gap-ms and --start-at-ns must be >= 0");
    const bool probe = gap_ms > 0;

    zoo_set_debug_level(log_level);
    session sess;
    zhandle_t* zh =
        zookeeper_init(servers.c_str(), on_event, static_cast<int>(session_ms), nullptr, &sess, 0);
    if (zh == nullptr) {
        const int err = errno;
        std::fprintf(stderr,
                     "dlock-bench-floor-zk: zookeeper_init(\"%s\"): %s (unresolvable host or bad "
                     "connect string?)\n",
                     servers.c_str(), std::strerror(err));
        return 1;
    }
    {
        std::unique_lock lk(sess.m);
        const bool up = sess.cv.wait_for(lk, std::chrono::milliseconds(connect_timeout_ms), [&] {
            return sess.state == ZOO_CONNECTED_STATE || sess.state == ZOO_EXPIRED_SESSION_STATE ||
                   sess.state == ZOO_AUTH_FAILED_STATE;
        });
        if (!up || sess.state != ZOO_CONNECTED_STATE) {
            const int state = sess.state;
            lk.unlock();
            std::fprintf(stderr,
                         "dlock-bench-floor-zk: cannot connect to ZooKeeper at %s within %lld ms "
                         "(state: %s)\n",
                         servers.c_str(), connect_timeout_ms, state_name(state));
            zookeeper_close(zh);
            return 1;
        }
    }

    // The lock-shaped write: an ephemeral sequential node, as every ZooKeeper lock recipe creates.
    const std::string prefix = std::string(probe ? "/dlock-floor-zk-probe-" : "/dlock-floor-zk-") +
                               std::to_string(::getpid()) + "-";
    const std::string value = "0123456789abcdef0123456789abcdef";
    char created[512];
    const auto fail = [&](const char* op, int rc) {
        std::fprintf(stderr, "dlock-bench-floor-zk: %s: %s (%d)\n", op, zerror(rc), rc);
        zookeeper_close(zh);
        return 1;
    };

    // Each call keeps its error for the report: the failing operation and ZooKeeper's code.
    const char* failed_op = "";
    int failed_rc = ZOK;
    const auto check = [&](const char* op, int rc) {
        if (rc == ZOK) return true;
        failed_op = op;
        failed_rc = rc;
        return false;
    };
    const auto read = [&] {
        Stat st{};
        return check("zoo_exists(\"/\")", zoo_exists(zh, "/", 0, &st));
    };
    const auto take = [&] {
        return check(
            "zoo_create(EPHEMERAL_SEQUENTIAL)",
            zoo_create(zh, prefix.c_str(), value.data(), static_cast<int>(value.size()),
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created));
    };
    const auto release = [&] { return check("zoo_delete", zoo_delete(zh, created, -1)); };
    const std::string client = std::string("libzookeeper_mt ") + ZOO_VERSION + " sync";
    // The probe: turns of a create, a read and the delete of the node just made. Otherwise the
    // blocks of reads and of write pairs.
    const std::array<std::function<bool()>, 3> turn{take, read, release};
    std::array<std::vector<std::int64_t>, 3> rtt;  // zk_create, zk_exists, zk_delete
    dlock_bench::floor_samples samples;
    const bool ok =
        probe ? dlock_bench::run_probe(start_at_ns, duration_s, gap_ms, max_ops, turn, rtt)
              : dlock_bench::run_floor_blocks(warmup_s, duration_s, max_ops, block_ms, samples,
                                              read, take, release, [] { return true; });
    if (!ok) return fail(failed_op, failed_rc);
    const int rc = zookeeper_close(zh);  // ends the session; no node of ours is left behind
    if (rc != ZOK) std::fprintf(stderr, "dlock-bench-floor-zk: zookeeper_close: %s\n", zerror(rc));
    if (probe)
        return dlock_bench::write_samples_file(
            out, client, {{"zk_delete", &rtt[2]}, {"zk_create", &rtt[0]}, {"zk_exists", &rtt[1]}});
    const char* const what[4] = {"zk_exists", "zk_create", "zk_delete", "zk_create_delete"};
    return dlock_bench::write_floor_file(out, client, what, samples);
}
