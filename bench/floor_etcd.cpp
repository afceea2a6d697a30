// dlock-bench-floor-etcd: workload W0's etcd part, the floor of any etcd lock.
//
// The same idea as dlock-bench-floor (bench/floor.cpp) and dlock-bench-floor-zk (floor_zk.cpp) for
// etcd: the thinnest client there is from C++ (gRPC C++'s synchronous API over the same generated
// stubs of etcd's rpc.proto that the etcd backend uses, one channel) against one member on
// loopback, after a warm-up, each round trip timed with CLOCK_MONOTONIC. It talks to etcd directly
// on purpose: it measures the machine and the server, not dlock.
//
//   dlock-bench-floor-etcd --servers HOST:PORT --out FILE [--duration-s S] [--max-ops N]
//                          [--warmup-s S] [--block-ms B] [--connect-timeout-ms T]
//                          [--gap-ms G] [--start-at-ns T]
//
// --servers is one member's client address (the first entry of a list is used). Operations timed:
//   etcd_range       Range of one key (etcd's default, a linearizable read: the member confirms
//                    with Raft that it may answer, without writing anything); the floor of an
//                    etcd read
//   etcd_put         Put of that key with a 32-byte value: a Raft commit, i.e. an entry appended
//                    to the write-ahead log and fsynced before the answer; the floor of an etcd
//                    write, and so of every step of a lock (take, release)
//   etcd_delete      DeleteRange of that key: a release's write
//   etcd_put_delete  the two together, from before the put to after the delete: the minimum of
//                    one etcd lock cycle (a real recipe's acquire is a transaction, plus a lease)
// Reads and writes run in alternating blocks of --block-ms (default 100), as in floor_zk.cpp, so
// that both see the same machine load while a read seldom follows a write. The loop stops after
// --duration-s seconds (default 3) or --max-ops operations of each kind. Before it, --warmup-s
// seconds (default 2) of the same blocks are run and not recorded.
//
// --gap-ms G > 0 is the probe instead: the round trip UNDER a workload's load, from a separate
// process while the workload runs (bench/run, docs/benchmarks.md). One operation every G ms on a
// fixed schedule (stats.hpp's pacer), a Put and a Range of the probe's own key alternately, for
// --duration-s seconds, with no warm-up beyond the first Put; --start-at-ns T (CLOCK_MONOTONIC,
// the workers' --start-at-ns) makes the timed operations start at T, after connecting. Its key,
// dlock-floor-etcd/probe/<pid>, is outside any lock's keys. FILE then gets the etcd_put samples
// and summary, and the etcd_range "done" record last.
//
// FILE gets JSON Lines: one {"what":W,"rtt_ns":N} per operation (for CDF plots), one
// {"event":"summary","what":W,"client":..,"n":..,"p50_ns":..,"p90_ns":..,"p99_ns":..,"max_ns":..,
// "mean_ns":..} for etcd_put, etcd_delete and etcd_put_delete, and the read floor's summary
// {"event":"done","what":"etcd_range",...} last (the records dlock-bench-floor-zk writes).
// Percentiles are nearest-rank. Integers are nanoseconds.
//
// Exit status: 0 when FILE was written; 1 when the member cannot be reached within
// --connect-timeout-ms (default 10000) or an operation fails; 64 for bad arguments.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "stats.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace pb = etcdserverpb;

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "dlock-bench-floor-etcd: %s\n"
                 "usage: dlock-bench-floor-etcd --servers HOST:PORT --out FILE [--duration-s S] "
                 "[--max-ops N] [--warmup-s S] [--block-ms B] [--connect-timeout-ms T] "
                 "[--gap-ms G] [--start-at-ns T]\n",
                 why);
    std::exit(64);
}

// Every call gets a deadline, so a member that stops answering ends the run with an error.
constexpr auto call_timeout = std::chrono::seconds(10);

}  // namespace

int main(int argc, char** argv) {
    std::string servers;
    std::string out;
    double duration_s = 3.0;
    long long max_ops = 1'000'000;
    double warmup_s = 2.0;
    long long block_ms = 100;
    long long connect_timeout_ms = 10'000;
    double gap_ms = 0;          // > 0: the probe (paced Put and Range, no blocks)
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
        else if (a == "--gap-ms")
            gap_ms = std::atof(std::string(v).c_str());
        else if (a == "--start-at-ns")
            start_at_ns = std::atoll(std::string(v).c_str());
        else
            usage("unknown option");
    }
    servers = servers.substr(0, servers.find(','));
    if (servers.empty() || out.empty() || servers.find(':') == std::string::npos)
        usage("--servers HOST:PORT and --out are required");
    if (duration_s <= 0 || max_ops <= 0 || warmup_s < 0 || block_ms <= 0 || connect_timeout_ms <= 0)
        usage(
            "--duration-s, --max-ops, --block-ms and --connect-timeout-ms must be > 0, "
            "--warmup-s >= 0");
    if (gap_ms < 0 || start_at_ns < 0) usage("--gap-ms and --start-at-ns must be >= 0");

    const auto channel = grpc::CreateChannel(servers, grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::milliseconds(connect_timeout_ms))) {
        std::fprintf(stderr,
                     "dlock-bench-floor-etcd: cannot connect to etcd at %s within %lld ms\n",
                     servers.c_str(), connect_timeout_ms);
        return 1;
    }
    const auto kv = pb::KV::NewStub(channel);
    const bool probe = gap_ms > 0;
    const std::string key = std::string(probe ? "dlock-floor-etcd/probe/" : "dlock-floor-etcd/") +
                            std::to_string(::getpid());

    pb::RangeRequest range;
    range.set_key(key);
    pb::PutRequest put;
    put.set_key(key);
    put.set_value("0123456789abcdef0123456789abcdef");
    pb::DeleteRangeRequest del;
    del.set_key(key);
    const char* failed_op = "";
    grpc::Status failed;
    // One call with its own context and deadline; false (and failed/failed_op set) on an error.
    const auto call = [&](const char* op, auto&& rpc) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + call_timeout);
        const grpc::Status st = rpc(ctx);
        if (st.ok()) return true;
        failed_op = op;
        failed = st;
        return false;
    };
    pb::RangeResponse range_resp;
    pb::PutResponse put_resp;
    pb::DeleteRangeResponse del_resp;
    const auto do_range = [&] {
        return call("Range",
                    [&](grpc::ClientContext& ctx) { return kv->Range(&ctx, range, &range_resp); });
    };
    const auto do_put = [&] {
        return call("Put", [&](grpc::ClientContext& ctx) { return kv->Put(&ctx, put, &put_resp); });
    };
    const auto do_delete = [&] {
        return call("DeleteRange", [&](grpc::ClientContext& ctx) {
            return kv->DeleteRange(&ctx, del, &del_resp);
        });
    };
    const auto fail = [&] {
        std::fprintf(stderr, "dlock-bench-floor-etcd: %s: %s (gRPC status %d)\n", failed_op,
                     failed.error_message().c_str(), static_cast<int>(failed.error_code()));
        return 1;
    };

    // The key exists during the read blocks (a Range that finds it, as a lock's check does), so
    // each block of writes ends with it put again.
    if (!do_put()) return fail();
    const std::string client = "gRPC C++ " + grpc::Version() + " sync";
    if (probe) {
        const std::array<std::function<bool()>, 2> turn{do_put, do_range};
        std::array<std::vector<std::int64_t>, 2> rtt;  // etcd_put, etcd_range
        if (!dlock_bench::run_probe(start_at_ns, duration_s, gap_ms, max_ops, turn, rtt))
            return fail();
        if (!do_delete()) return fail();
        return dlock_bench::write_samples_file(out, client,
                                               {{"etcd_range", &rtt[1]}, {"etcd_put", &rtt[0]}});
    }
    dlock_bench::floor_samples samples;
    if (!dlock_bench::run_floor_blocks(warmup_s, duration_s, max_ops, block_ms, samples, do_range,
                                       do_put, do_delete, do_put))
        return fail();
    if (!do_delete()) return fail();  // nothing of ours is left behind
    const char* const what[4] = {"etcd_range", "etcd_put", "etcd_delete", "etcd_put_delete"};
    return dlock_bench::write_floor_file(out, client, what, samples);
}
