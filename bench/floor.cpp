// dlock-bench-floor: workload W0, the physical floor every other figure is divided by.
//
// One Redis PING round trip over loopback TCP from C, with hiredis 0.14's synchronous API (the
// thinnest client there is: one write(2), one blocking read(2), no threads) on one connection,
// after a warm-up. Each round trip is timed with CLOCK_MONOTONIC. This program talks to Redis
// directly on purpose: it measures the machine (kernel loopback + two wake-ups + redis-server's
// event loop), not dlock, so it is the one bench/ program that does not go through <dlock/...>.
//
//   dlock-bench-floor --servers HOST:PORT --out FILE [--duration-s S] [--max-ops N] [--warmup N]
//                     [--interval-us U]
//
// --interval-us U > 0 sleeps U µs after each PING: the floor UNDER LOAD, measured from a separate
// process while a workload runs, without adding a busy client of its own to that load.
//
// With --reference-s S > 0 it also times, for reference only (they are not the floor), the same
// client running what a lock operation costs the server, so the report can split a lock's latency
// into "the server's work" and "the client library's own overhead". Each loop round runs one PING
// and one of each reference, so all of them see the same machine load:
//   set_nx_px       SET k tok NX PX 10000 (the plainest lock command), then an untimed DEL
//   multi_set_incr  MULTI; SET k tok NX PX; INCR fence; PTTL k; EXEC in one write (a script-free
//                   acquire that also hands out a fencing token), then an untimed DEL
//   acquire_script  EVALSHA of dlock's acquire.lua (TYPE, INCR fence, SET PX) on a free lock
//   release_script  EVALSHA of dlock's release.lua (GET, DEL, PUBLISH) on the lock just taken
//   fanout_ping_N   with N >= 3 (5) --servers: one PING written to each of the first N servers
//                   before any reply is read (the physical floor of a parallel Redlock round)
// The scripts are read from --lua-dir (default: the source tree's src/redis/lua).
//
// FILE gets JSON Lines: one {"rtt_ns":N} per PING (for CDF plots), one
// {"event":"summary","what":W,...} per reference, and the floor's own summary record
// {"event":"done","what":"redis_ping","n":..,"p50_ns":..,"p90_ns":..,"p99_ns":..,"max_ns":..,
// "mean_ns":..} last. Percentiles are nearest-rank, as in the Figures section of
// docs/benchmarks.md. A ZooKeeper round-trip floor is pending (no ZooKeeper backend yet).
#include <hiredis/hiredis.h>
#include <time.h>

#include "stats.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using dlock_bench::now_ns;
using dlock_bench::summarise;
using dlock_bench::summary;

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "dlock-bench-floor: %s\n"
                 "usage: dlock-bench-floor --servers HOST:PORT --out FILE [--duration-s S] "
                 "[--max-ops N] [--warmup N] [--reference-s S] [--lua-dir DIR] [--interval-us U]\n",
                 why);
    std::exit(64);
}

bool ping(redisContext* c) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    if (r != nullptr) freeReplyObject(r);
    return ok;
}

/// Runs argv once; true unless the connection failed or the server answered an error.
bool call(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()));
    const bool ok = r != nullptr && r->type != REDIS_REPLY_ERROR;
    if (r != nullptr && r->type == REDIS_REPLY_ERROR)
        std::fprintf(stderr, "dlock-bench-floor: %s\n", r->str);
    if (r != nullptr) freeReplyObject(r);
    return ok;
}

/// SCRIPT LOAD of a file; returns the SHA-1, or "" on failure.
std::string load_script(redisContext* c, const std::string& path) {
    std::ifstream in(path);
    if (!in) return {};
    std::stringstream text;
    text << in.rdbuf();
    const std::string body = text.str();
    auto* r = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %b", body.data(), body.size()));
    std::string sha;
    if (r != nullptr && r->type == REDIS_REPLY_STRING) sha.assign(r->str, r->len);
    if (r != nullptr) freeReplyObject(r);
    return sha;
}

void print_summary(std::FILE* f, const char* event, const char* what, const summary& s) {
    char client[64];
    std::snprintf(client, sizeof client, "hiredis %d.%d.%d sync", HIREDIS_MAJOR, HIREDIS_MINOR,
                  HIREDIS_PATCH);
    dlock_bench::print_summary(f, event, what, client, s);
}

}  // namespace

int main(int argc, char** argv) {
    std::string server;
    std::vector<std::string> all_servers;
    std::string out;
    double duration_s = 2.0;
    long long max_ops = 200'000;
    long long warmup = 2'000;
    double reference_s = 0;     // > 0: also time the references, interleaved with the PINGs
    long long interval_us = 0;  // > 0: sleep this long after each PING (floor under load)
#ifdef DLOCK_LUA_DIR
    std::string lua_dir = DLOCK_LUA_DIR;
#else
    std::string lua_dir;
#endif
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--help") usage("help");
        if (i + 1 >= argc) usage("option without value");
        const std::string_view v = argv[++i];
        if (a == "--servers") {
            server = std::string(v.substr(0, v.find(',')));
            for (std::string_view rest = v;;) {
                const auto comma = rest.find(',');
                all_servers.emplace_back(rest.substr(0, comma));
                if (comma == std::string_view::npos) break;
                rest.remove_prefix(comma + 1);
            }
        } else if (a == "--out")
            out = v;
        else if (a == "--duration-s")
            duration_s = std::atof(std::string(v).c_str());
        else if (a == "--max-ops")
            max_ops = std::atoll(std::string(v).c_str());
        else if (a == "--warmup")
            warmup = std::atoll(std::string(v).c_str());
        else if (a == "--reference-s")
            reference_s = std::atof(std::string(v).c_str());
        else if (a == "--lua-dir")
            lua_dir = v;
        else if (a == "--interval-us")
            interval_us = std::atoll(std::string(v).c_str());
        else
            usage("unknown option");
    }
    if (server.empty() || out.empty() || server.rfind(':') == std::string::npos) {
        usage("--servers and --out are required");
    }
    const auto connect = [](const std::string& where) -> redisContext* {
        const auto colon = where.rfind(':');
        std::string host = where.substr(0, colon);
        if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
        const timeval connect_timeout{2, 0};
        redisContext* ctx = redisConnectWithTimeout(
            host.c_str(), std::atoi(where.c_str() + colon + 1), connect_timeout);
        if (ctx == nullptr || ctx->err) {
            std::fprintf(stderr, "dlock-bench-floor: connect %s: %s\n", where.c_str(),
                         ctx ? ctx->errstr : "out of memory");
            return nullptr;
        }
        return ctx;
    };
    redisContext* c = connect(server);
    if (c == nullptr) return 1;
    // Fan-out references (Redlock's physical floor): with several --servers, one PING written to
    // each of the first 3 and of the first 5 servers before any reply is read.
    std::vector<redisContext*> fan;
    if (reference_s > 0 && all_servers.size() >= 3) {
        for (std::size_t i = 0; i < std::min<std::size_t>(all_servers.size(), 5); ++i) {
            fan.push_back(connect(all_servers[i]));
            if (fan.back() == nullptr) return 1;
        }
    }
    for (long long i = 0; i < warmup; ++i) {
        if (!ping(c)) {
            std::fprintf(stderr, "dlock-bench-floor: PING failed: %s\n", c->errstr);
            return 1;
        }
    }
    // One round = one PING, then (with --reference-s > 0) one of each reference, so that the floor
    // and the references see the same machine load (this box is shared; load drifts over seconds).
    const std::string token = "0123456789abcdef0123456789abcdef";
    const std::string lock = "dlock-floor:{" + std::to_string(now_ns()) + "}";
    const std::string fence = lock + ":fence";
    const std::string channel = lock + ":released";
    std::string acquire_sha;
    std::string release_sha;
    const bool references = reference_s > 0;
    if (references) {
        acquire_sha = load_script(c, lua_dir + "/acquire.lua");
        release_sha = load_script(c, lua_dir + "/release.lua");
        if (acquire_sha.empty() || release_sha.empty()) {
            std::fprintf(stderr,
                         "dlock-bench-floor: cannot load %s/{acquire,release}.lua (--lua-dir)\n",
                         lua_dir.c_str());
            return 1;
        }
    }
    struct reference {
        const char* what;
        std::vector<std::int64_t> rtt;
    };
    std::vector<std::int64_t> rtt;
    rtt.reserve(static_cast<std::size_t>(max_ops));
    reference set_nx{"set_nx_px", {}};
    reference multi{"multi_set_incr", {}};
    reference acq{"acquire_script", {}};
    reference rel{"release_script", {}};
    reference fan3{"fanout_ping_3", {}};
    reference fan5{"fanout_ping_5", {}};
    const auto fan_out = [&](std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) redisAppendCommand(fan[i], "PING");
        for (std::size_t i = 0; i < n; ++i) {
            int done = 0;
            while (!done) {
                if (redisBufferWrite(fan[i], &done) != REDIS_OK) return false;
            }
        }
        for (std::size_t i = 0; i < n; ++i) {
            void* r = nullptr;
            if (redisGetReply(fan[i], &r) != REDIS_OK || r == nullptr) return false;
            freeReplyObject(r);
        }
        return true;
    };
    const std::int64_t deadline =
        now_ns() + static_cast<std::int64_t>(
                       (references ? std::max(duration_s, reference_s) : duration_s) * 1e9);
    while (static_cast<long long>(rtt.size()) < max_ops && now_ns() < deadline) {
        std::int64_t t0 = now_ns();
        if (!ping(c)) {
            std::fprintf(stderr, "dlock-bench-floor: PING failed: %s\n", c->errstr);
            return 1;
        }
        rtt.push_back(now_ns() - t0);
        if (interval_us > 0) {
            const timespec pause{static_cast<time_t>(interval_us / 1'000'000),
                                 static_cast<long>(interval_us % 1'000'000) * 1000};
            nanosleep(&pause, nullptr);
        }
        if (!references) continue;

        t0 = now_ns();
        if (!call(c, {"SET", lock, token, "NX", "PX", "10000"})) return 1;
        set_nx.rtt.push_back(now_ns() - t0);
        if (!call(c, {"DEL", lock})) return 1;

        // A script-free acquire that also hands out a fencing token: one write, no Lua.
        t0 = now_ns();
        redisAppendCommand(c, "MULTI");
        redisAppendCommand(c, "SET %b %b NX PX 10000", lock.data(), lock.size(), token.data(),
                           token.size());
        redisAppendCommand(c, "INCR %b", fence.data(), fence.size());
        redisAppendCommand(c, "PTTL %b", lock.data(), lock.size());
        redisAppendCommand(c, "EXEC");
        for (int i = 0; i < 5; ++i) {
            void* r = nullptr;
            if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) return 1;
            freeReplyObject(r);
        }
        multi.rtt.push_back(now_ns() - t0);
        if (!call(c, {"DEL", lock})) return 1;

        t0 = now_ns();
        if (!call(c, {"EVALSHA", acquire_sha, "2", lock, fence, token, "10000"})) return 1;
        acq.rtt.push_back(now_ns() - t0);
        t0 = now_ns();
        if (!call(c, {"EVALSHA", release_sha, "1", lock, token, channel})) return 1;
        rel.rtt.push_back(now_ns() - t0);

        for (auto* r : {&fan3, &fan5}) {
            const std::size_t n = r == &fan3 ? 3 : 5;
            if (fan.size() < n) continue;
            t0 = now_ns();
            if (!fan_out(n)) return 1;
            r->rtt.push_back(now_ns() - t0);
        }
    }
    for (auto* f : fan) redisFree(f);
    std::vector<reference> refs;
    if (references) {
        call(c, {"DEL", lock, fence});
        refs.push_back(std::move(set_nx));
        refs.push_back(std::move(multi));
        refs.push_back(std::move(acq));
        refs.push_back(std::move(rel));
        if (!fan3.rtt.empty()) refs.push_back(std::move(fan3));
        if (!fan5.rtt.empty()) refs.push_back(std::move(fan5));
    }
    redisFree(c);

    const std::string tmp = out + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
        std::perror(tmp.c_str());
        return 1;
    }
    for (const auto v : rtt) std::fprintf(f, "{\"rtt_ns\":%lld}\n", static_cast<long long>(v));
    for (const auto& r : refs) print_summary(f, "summary", r.what, summarise(r.rtt));
    print_summary(f, "done", "redis_ping", summarise(rtt));
    if (std::fclose(f) != 0 || std::rename(tmp.c_str(), out.c_str()) != 0) {
        std::perror(out.c_str());
        return 1;
    }
    return 0;
}
