// dlock-bench-floor: workload W0, the physical floor every other figure is divided by.
//
// One Redis PING round trip over loopback TCP from C, with hiredis 0.14's synchronous API (the
// thinnest client there is: one write(2), one blocking read(2), no threads) on one connection,
// after a warm-up. Each round trip is timed with CLOCK_MONOTONIC. This program talks to Redis
// directly on purpose: it measures the machine (kernel loopback + two wake-ups + redis-server's
// event loop), not dlock, so it is the one bench/ program that does not go through <dlock/...>.
//
//   dlock-bench-floor --servers HOST:PORT --out FILE [--duration-s S] [--max-ops N] [--warmup N]
//                     [--gap-ms G] [--start-at-ns T] [--reference-s S] [--server-cost-s S]
//
// --gap-ms G > 0 is the probe: one PING every G ms (stats.hpp's pacer: a fixed schedule, one PING
// per gap whatever the round trips take) for --duration-s seconds, so that a separate process
// measures the round trip UNDER a workload's load while it runs without adding a busy client of
// its own to that load. --start-at-ns T (CLOCK_MONOTONIC, the workers' --start-at-ns) makes the
// timed PINGs start at T, after connecting and the warm-up, so the probe covers the workload's
// whole window. Neither goes with --reference-s.
//
// With --reference-s S > 0 it also times, for reference only (they are not the floor), the same
// client running what a lock operation costs the server, so the report can split a lock's latency
// into "the server's work" and "the client library's own overhead". Each loop round runs one PING
// and one of each reference, so all of them see the same machine load:
//   set_nx_px       SET k tok NX PX 10000 (the plainest lock command), then an untimed DEL
//   multi_set_incr  MULTI; SET k tok NX PX; INCR fence; PTTL k; EXEC in one write (a script-free
//                   acquire that also hands out a fencing token), then an untimed DEL
//   acquire_script  FCALL of dlock's acquire.lua on a free lock, with the mutex's keys and
//                   arguments (kind guard EXISTS, TIME, SET ... GET fence, SET PX)
//   release_script  FCALL of dlock's release.lua (GET, DEL, PUBLISH, EXISTS) on the lock just
//                   taken
//   fanout_ping_N   with N >= 3 (5) --servers: one PING written to each of the first N servers
//                   before any reply is read (the physical floor of a parallel Redlock round)
//   fanout_acquire_N  the same with dlock's acquire script (as acquire_script) instead of the
//                   PING, then an untimed release on all N: a Redlock acquire's floor when its
//                   servers run the script (N scripts on the machine's cores, not N PINGs)
// The scripts are the ones the library sends, composed at build time into a Redis Functions
// library (cmake/embed_lua.cmake puts the files of lib/ in once, e.g. acquire.lua's kind guard)
// and embedded in this binary: the raw .lua files are not runnable on their own. (The JSON keeps
// the field names evalsha_us_per_pair*: the scripts' time, whichever command ran them.)
//
// With --server-cost-s S > 0, after the PINGs (and references), the server-cost op: what the
// SERVER spends per uncontended lock/unlock pair when the pair runs as two scripts, read from
// INFO (cpu, commandstats) around batches of pairs on 8 lock keys in turn, each batch of 8 pairs
// written at once (pipelined: the server's time is the figure, not the round trips). Two variants,
// alternated in 8 series each so both see the same load; each variant's figures are those of its
// quietest series (print_cost):
//   bare_scripts    two scripts written here (kBareAcquire, kBareRelease) that run exactly the 8
//                   commands dlock's safety rules need and nothing else, with the KEYS and ARGV
//                   counts dlock's mutex sends (5 keys; 11 and 7 ARGV): the least any protocol that
//                   runs those commands in scripts can cost (EVALSHA itself, KEYS/ARGV made into
//                   Lua strings, each redis.call's bridge, the commands' own work)
//   dlock_scripts   dlock's own acquire and release (embedded, as above) with the same keys and
//                   arguments as the library's mutex on one server, first attempt (no waiter id)
//
// With --relay-s S > 0, last, the hand-off floor (W3/W4's physical floor, more exact than one
// PING): --relay-workers N threads (default 8), each with a connection of its own SUBSCRIBEd to a
// channel of its own and one to PUBLISH on, pass the turn around a ring for S seconds: the one
// whose turn it is busy-waits --relay-cs-us C microseconds (default 1000, W4's critical
// section), then PUBLISHes the time to the next one's channel, whose blocking read returns. A
// hand-off is the release's write, Redis' fan-out to the subscriber and the waiter's wake-up:
// what a notified lock's hand-off cannot go below, with the same busy critical section and as
// many threads as W4 has workers on the same two cores. Recorded: each hand-off (from before the
// PUBLISH to after the read) and the share of the window the turn was held ("relay_handoff").
// With --relay-quorum N (3 or 5, at most the number of --servers), then two more relays with an
// empty critical section (W3's): on the first server ("relay_handoff_1of1"), and on the first N,
// the turn PUBLISHed on every one (all written before any reply is read) and taken by the next
// thread once a majority's messages came ("relay_handoff_2of3"): the floor of a Redlock hand-off
// (the release reaching a quorum, the quorum's notifications reaching the waiter) and of a
// single-server one, with the same threads on the same cores. The relay fails if a turn is taken
// twice or out of order.
// With --relay-scripts 1 (and --relay-s), then three more single-server relays with an empty
// critical section, the same threads making the same round trips as a fair_mutex worker of W3 (the
// release, then the releaser's next attempt, each awaited; the next holder woken by its grant
// message), so that a hand-off's time can be split between the server's scripts and dlock's client:
// "relay_handoff_min_scripts" passes the turn with kMinHandOff (compare the owner, raise the fence,
// set the next owner, PUBLISH: what a fenced direct hand-off needs) and then runs kMinJoin (TIME,
// ZADD, PTTL: a waiter registering); "relay_handoff_min_pipelined" writes the two scripts at once
// (a client that does not await its release's reply: the least of the three);
// "relay_handoff_fair_scripts" runs dlock's own fair_acquire and
// fair_release (embedded, as above) from bare hiredis threads, with the library's keys, arguments,
// hand-off channels and the PING ahead of a release after a wait, each thread waiting for the grant
// that names its token. Recorded for both: from before the release's write to the next holder's
// wake-up. With --relay-quorum N too, one more: "relay_handoff_min_scripts_2of3" (or 3of5), the
// least scripts' relay on the first N servers (the hand-off as kMinHandOffQuorum), each script
// written to all N before any reply is read and the turn taken at a majority's messages: what a
// fenced Redlock hand-off cannot go below (the release's compare, fence and hand-off on every node,
// then the releaser queueing again on every node), with the same threads on the same cores.
// With --relay-procs 1 (and --relay-s), the relays W3 and W4 are judged by run again with a
// process per member instead of a thread, as the workloads' workers are (a wake-up into another
// process loads its page tables, which one into another thread of the same process skips; on a
// paravirtualised VM that costs more): "relay_handoff_procs" (W4's busy critical section, with its
// own
// {"event":"relay_procs",...} held share), "relay_handoff_min_scripts_procs" with --relay-scripts,
// and "relay_handoff_min_scripts_2of3_procs" with --relay-quorum too. With --relay-scale N,...
// (and --relay-procs 1 --relay-scripts 1) then the least scripts' relay on one server between N
// processes for each N: "relay_handoff_min_scripts_procs_N", the floor of the scale curves (a
// hot key's hand-off with N waiting workers; for N = --relay-workers, the relay above).
//
// FILE gets JSON Lines: one {"rtt_ns":N} per PING (for CDF plots), one
// {"event":"summary","what":W,...} per reference, one {"event":"server_cost","what":W,"pairs":..,
// "evalsha_us_per_pair":..,"command_us_per_pair":..,"cpu_us_per_pair":..,"commands_per_pair":..,
// "scripts_per_pair":..,...} per server-cost variant, {"event":"summary","what":"relay_handoff",
// ...} and {"event":"relay","workers":..,"cs_us":..,"held_fraction":..} with --relay-s, one
// {"event":"summary","what":"relay_handoff_MofN",...} per --relay-quorum relay, one
// {"event":"summary","what":"relay_handoff_min_scripts"|"relay_handoff_min_pipelined"|
// "relay_handoff_fair_scripts",...} each with --relay-scripts 1 (and
// "relay_handoff_min_scripts_MofN" with --relay-quorum N too), the "_procs" records of
// --relay-procs (above), and the
// floor's own summary record
// {"event":"done","what":"redis_ping","n":..,"p50_ns":..,"p90_ns":..,"p99_ns":..,"max_ns":..,
// "mean_ns":..} last. Percentiles are nearest-rank, as in the Figures section of
// docs/benchmarks.md. The ZooKeeper floor is dlock-bench-floor-zk (floor_zk.cpp).
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stats.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace dlock::redis::detail::lua {
// The table generated by dlock_embed_lua (bench/CMakeLists.txt) from acquire.lua, release.lua,
// fair_acquire.lua and fair_release.lua.
struct embedded_script {
    std::string_view name, text, sha1, function;
};
extern const embedded_script embedded[];
extern const std::size_t embedded_count;
extern const std::string_view library;
}  // namespace dlock::redis::detail::lua

namespace {

using dlock_bench::now_ns;
using dlock_bench::summarise;
using dlock_bench::summary;

[[noreturn]] void usage(const char* why) {
    std::fprintf(
        stderr,
        "dlock-bench-floor: %s\n"
        "usage: dlock-bench-floor --servers HOST:PORT --out FILE [--duration-s S] "
        "[--max-ops N] [--warmup N] [--reference-s S] [--gap-ms G] [--start-at-ns T] "
        "[--server-cost-s S] [--relay-s S [--relay-workers N] [--relay-cs-us C] "
        "[--relay-quorum N] [--relay-scripts 1] [--relay-procs 1] [--relay-scale N,...]]\n",
        why);
    std::exit(64);
}

bool ping(redisContext* c) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    if (r != nullptr) freeReplyObject(r);
    return ok;
}

/// Queues `args` on the context; the next redisGetReply writes it.
void append_argv(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
}

/// Runs argv once; true unless the connection failed or the server answered an error.
bool call(redisContext* c, const std::vector<std::string>& args) {
    append_argv(c, args);
    void* reply = nullptr;
    auto* r = redisGetReply(c, &reply) == REDIS_OK ? static_cast<redisReply*>(reply) : nullptr;
    const bool ok = r != nullptr && r->type != REDIS_REPLY_ERROR;
    if (r != nullptr && r->type == REDIS_REPLY_ERROR)
        std::fprintf(stderr, "dlock-bench-floor: %s\n", r->str);
    if (r != nullptr) freeReplyObject(r);
    return ok;
}

/// The function of the embedded, composed script `name` (src/redis/lua/<name>.lua) in dlock's
/// Redis Functions library, which is loaded first (FUNCTION LOAD REPLACE: as the library sends it,
/// docs/redis-lock.md); "" on failure (printed).
std::string load_script(redisContext* c, std::string_view name) {
    namespace lua = dlock::redis::detail::lua;
    const lua::embedded_script* found = nullptr;
    for (std::size_t i = 0; i < lua::embedded_count; ++i) {
        if (lua::embedded[i].name == name) found = &lua::embedded[i];
    }
    if (found == nullptr) {
        std::fprintf(stderr, "dlock-bench-floor: no embedded %.*s.lua\n",
                     static_cast<int>(name.size()), name.data());
        return {};
    }
    auto* r = static_cast<redisReply*>(
        redisCommand(c, "FUNCTION LOAD REPLACE %b", lua::library.data(), lua::library.size()));
    const bool ok = r != nullptr && r->type == REDIS_REPLY_STRING;
    if (r != nullptr && r->type == REDIS_REPLY_ERROR)
        std::fprintf(stderr, "dlock-bench-floor: FUNCTION LOAD: %s\n", r->str);
    if (r != nullptr) freeReplyObject(r);
    return ok ? std::string(found->function) : std::string();
}

void print_summary(std::FILE* f, const char* event, const char* what, const summary& s) {
    char client[64];
    std::snprintf(client, sizeof client, "hiredis %d.%d.%d sync", HIREDIS_MAJOR, HIREDIS_MINOR,
                  HIREDIS_PATCH);
    dlock_bench::print_summary(f, event, what, client, s);
}

// The server-cost op's bare scripts: the 8 commands dlock's safety rules need in an uncontended
// lock/unlock pair of its mutex (docs/benchmarks.md, "Floors"), nothing else. KEYS and ARGV as
// dlock's acquire.lua and release.lua get them: KEYS[1] lock key, KEYS[2] fence counter, KEYS[3]
// the mutex waiters; acquire ARGV[1] token, ARGV[2] lease ms, ARGV[10] the fence's idle period ms;
// release ARGV[1] token, ARGV[2] release channel. The acquire: the kind guard (one EXISTS of the
// lock key and the keys other lock kinds leave on its name), the fence (TIME, then the counter set
// to the clock in microseconds with GET: the replaced value is what a rising token checks against),
// the lock. The release: compare (GET), delete, wake (PUBLISH), and whether waiters are queued.
constexpr std::string_view kBareAcquire = R"lua(local base = KEYS[1]
redis.call('EXISTS', base, base .. ':readers', base .. ':queue', base .. ':alive', base .. ':mutex_waiters')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('SET', KEYS[2], string.format('%d', now), 'PX', ARGV[10], 'GET')
redis.call('SET', base, ARGV[1], 'PX', ARGV[2])
return {1, now}
)lua";
constexpr std::string_view kBareRelease =
    R"lua(if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
redis.call('EXISTS', KEYS[3])
return 1
)lua";

// --relay-scripts' least scripts. KEYS[1] owner, KEYS[2] fence counter; ARGV[1] the releaser,
// ARGV[2] the next owner, ARGV[3] its channel, ARGV[4] the turn's message.
constexpr std::string_view kMinHandOff =
    R"lua(if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('not the owner') end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', 30000)
redis.call('PUBLISH', ARGV[3], ARGV[4])
return fence
)lua";
// The same on a quorum of servers, where a node may get a later turn's hand-off before an earlier
// one's: a releaser preempted between its writes to the nodes has a majority's messages out, and
// the next holder's writes, ahead of its own to the last node (about 1 node hand-off in 75 on a
// 2-core VM; the single-server script's equality compare then fails that node for good). So the
// owner is the holder's turn number, and a hand-off from an earlier turn than
// the node's owner does nothing (as a release where it is not the owner does nothing on a Redlock
// node); a later one catches a lagging node up. The same commands as kMinHandOff.
// KEYS as kMinHandOff's; ARGV[1] the releaser's turn, ARGV[2] the next one, ARGV[3], ARGV[4] as
// its.
constexpr std::string_view kMinHandOffQuorum =
    R"lua(if (tonumber(redis.call('GET', KEYS[1])) or 0) > tonumber(ARGV[1]) then return 0 end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', 30000)
redis.call('PUBLISH', ARGV[3], ARGV[4])
return fence
)lua";
// KEYS[1] queue, KEYS[2] owner; ARGV[1] the waiter.
constexpr std::string_view kMinJoin = R"lua(local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1], ARGV[1])
return redis.call('PTTL', KEYS[2])
)lua";

/// SCRIPT LOAD of `text`; its SHA-1, or "" on failure (printed).
std::string load_text(redisContext* c, std::string_view what, std::string_view text) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %b", text.data(), text.size()));
    std::string sha;
    if (r != nullptr && r->type == REDIS_REPLY_STRING) sha.assign(r->str, r->len);
    if (sha.empty()) {
        std::fprintf(stderr, "dlock-bench-floor: SCRIPT LOAD %.*s: %s\n",
                     static_cast<int>(what.size()), what.data(),
                     r != nullptr && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
    }
    if (r != nullptr) freeReplyObject(r);
    return sha;
}

/// What INFO cpu and INFO commandstats say at one moment (sums since the server started).
struct server_stats {
    double cpu_s = 0;     // used_cpu_user + used_cpu_sys
    long long calls = 0;  // every command but INFO, scripts' own commands included
    long long script_calls = 0;
    long long script_usec = 0;   // FCALL / EVALSHA / EVAL: the scripts, their commands included
    long long command_usec = 0;  // the other commands (those the scripts ran, here)
};

/// INFO cpu commandstats, parsed; false (printed) when the server did not answer.
bool read_stats(redisContext* c, server_stats& out) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "INFO cpu commandstats"));
    if (r == nullptr || r->type != REDIS_REPLY_STRING) {
        std::fprintf(stderr, "dlock-bench-floor: INFO failed: %s\n",
                     r != nullptr && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        if (r != nullptr) freeReplyObject(r);
        return false;
    }
    out = {};
    const std::string_view text(r->str, r->len);
    const auto number = [](std::string_view s) {
        long long v = 0;
        std::from_chars(s.data(), s.data() + s.size(), v);
        return v;
    };
    const auto field = [](std::string_view line, std::string_view name) {
        const auto at = line.find(name);
        if (at == std::string_view::npos) return std::string_view{};
        auto v = line.substr(at + name.size());
        return v.substr(0, v.find(','));
    };
    for (std::size_t pos = 0; pos < text.size();) {
        auto end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        auto line = text.substr(pos, end - pos);
        pos = end + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.starts_with("used_cpu_user:") || line.starts_with("used_cpu_sys:")) {
            out.cpu_s += std::atof(std::string(line.substr(line.find(':') + 1)).c_str());
            continue;
        }
        if (!line.starts_with("cmdstat_")) continue;
        const auto name = line.substr(8, line.find(':') - 8);
        if (name == "info") continue;
        const long long calls = number(field(line, "calls="));
        const long long usec = number(field(line, "usec="));
        out.calls += calls;
        if (name == "evalsha" || name == "eval" || name == "fcall") {
            out.script_calls += calls;
            out.script_usec += usec;
        } else if (name.find('|') == std::string_view::npos) {
            out.command_usec += usec;
        }
    }
    freeReplyObject(r);
    return true;
}

/// The script calls of a dlock::mutex acquire and release of `lock` on one server, with the keys
/// and arguments the library sends (engine::attempt, engine::release_everywhere; the key suffixes
/// of src/redis/protocol.cpp): a first attempt (no waiter id) and its release. `verb` is FCALL
/// (`acquire` and `release` name functions, as the library sends dlock's scripts) or EVALSHA
/// (they are SHA-1s: the bare scripts).
std::pair<std::vector<std::string>, std::vector<std::string>> mutex_script_calls(
    const char* verb, const std::string& acquire, const std::string& release,
    const std::string& lock, const std::string& token) {
    std::vector<std::string> keys;
    for (const auto s : {"", ":fence", ":mutex_waiters", ":mutex_alive", ":mutex_arrivals"})
        keys.push_back(lock + s);
    const std::string channel = lock + ":released";
    std::vector<std::string> a{verb, acquire, std::to_string(keys.size())};
    a.insert(a.end(), keys.begin(), keys.end());
    // engine::attempt: token, lease, count, limit, waiter liveness, channel, re-entry, ticket
    // floor, waiter id (none: a first attempt), fence idle period, clock floor.
    a.insert(a.end(), {token, "10000", "1", "0", "2000", channel, "0", "0", "", "86400000", "1"});
    std::vector<std::string> r{verb, release, std::to_string(keys.size())};
    r.insert(r.end(), keys.begin(), keys.end());
    // engine::release_everywhere: token, channel, hand-off lease, "0", fence idle period, the
    // waiter id it registered under (none), clock floor.
    r.insert(r.end(), {token, channel, "2000", "0", "86400000", "", "1"});
    return {std::move(a), std::move(r)};
}

/// What the server spent on one series of pairs: differences of INFO around it.
struct cost_series {
    long long pairs = 0;
    server_stats spent;
    double script_us_per_pair() const {
        return static_cast<double>(spent.script_usec) / static_cast<double>(pairs);
    }
};

/// One variant of the server-cost op: a pair of scripts and what the server spent on them.
struct cost_variant {
    const char* what;
    const char* verb;  ///< FCALL or EVALSHA (mutex_script_calls)
    std::string acquire_fn, release_fn;
    std::vector<cost_series> series;
};

/// Runs lock/unlock pairs of `v` on `locks` in turn for `seconds`, 8 pairs per write, and adds the
/// server's spending (INFO before and after) to v.series. False (printed) on any failure or on a
/// reply that is not a grant and a release.
bool run_pairs(redisContext* c, cost_variant& v, const std::vector<std::string>& locks,
               const std::string& token, double seconds) {
    server_stats before;
    server_stats after;
    cost_series one;
    if (!read_stats(c, before)) return false;
    const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(seconds * 1e9);
    std::vector<std::vector<std::string>> acquire_args;
    std::vector<std::vector<std::string>> release_args;
    for (const auto& lock : locks) {
        auto [a, r] = mutex_script_calls(v.verb, v.acquire_fn, v.release_fn, lock, token);
        acquire_args.push_back(std::move(a));
        release_args.push_back(std::move(r));
    }
    const auto append = [&](const std::vector<std::string>& args) {
        std::vector<const char*> argv;
        std::vector<std::size_t> lens;
        for (const auto& x : args) {
            argv.push_back(x.data());
            lens.push_back(x.size());
        }
        return redisAppendCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()) ==
               REDIS_OK;
    };
    while (now_ns() < deadline) {
        for (std::size_t i = 0; i < locks.size(); ++i) {
            if (!append(acquire_args[i]) || !append(release_args[i])) return false;
        }
        for (std::size_t i = 0; i < 2 * locks.size(); ++i) {
            void* p = nullptr;
            if (redisGetReply(c, &p) != REDIS_OK || p == nullptr) {
                std::fprintf(stderr, "dlock-bench-floor: %s: %s\n", v.what, c->errstr);
                return false;
            }
            const auto* r = static_cast<const redisReply*>(p);
            const bool ok = i % 2 == 0 ? r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
                                             r->element[0]->type == REDIS_REPLY_INTEGER &&
                                             r->element[0]->integer == 1
                                       : r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            if (!ok) {
                std::fprintf(stderr, "dlock-bench-floor: %s: %s is not a %s\n", v.what,
                             r->type == REDIS_REPLY_ERROR ? r->str : "the reply",
                             i % 2 == 0 ? "grant" : "release");
            }
            freeReplyObject(p);
            if (!ok) return false;
        }
        one.pairs += static_cast<long long>(locks.size());
    }
    if (!read_stats(c, after)) return false;
    one.spent.cpu_s = after.cpu_s - before.cpu_s;
    one.spent.calls = after.calls - before.calls;
    one.spent.script_calls = after.script_calls - before.script_calls;
    one.spent.script_usec = after.script_usec - before.script_usec;
    one.spent.command_usec = after.command_usec - before.command_usec;
    if (one.pairs > 0) v.series.push_back(one);
    return true;
}

/// The variant's record. Its per-pair figures are those of its quietest series (the least
/// script time per pair: on a shared machine, a series the server spent preempted counts the
/// waits in its script time), so that the floor they give errs low; the median script time per
/// pair of all series is beside them (for comparing variants: less noisy than one series).
void print_cost(std::FILE* f, const cost_variant& v, std::size_t keys, double seconds) {
    if (v.series.empty()) return;
    const auto& q = *std::min_element(v.series.begin(), v.series.end(),
                                      [](const cost_series& a, const cost_series& b) {
                                          return a.script_us_per_pair() < b.script_us_per_pair();
                                      });
    long long pairs = 0;
    std::vector<double> per_pair;
    for (const auto& x : v.series) {
        pairs += x.pairs;
        per_pair.push_back(x.script_us_per_pair());
    }
    std::sort(per_pair.begin(), per_pair.end());
    const std::size_t m = per_pair.size() / 2;
    const double median =
        per_pair.size() % 2 == 1 ? per_pair[m] : (per_pair[m - 1] + per_pair[m]) / 2;
    const double n = static_cast<double>(q.pairs);
    std::fprintf(f,
                 "{\"event\":\"server_cost\",\"what\":\"%s\",\"client\":\"hiredis %d.%d.%d sync, "
                 "pipelined\",\"keys\":%zu,\"pairs_per_write\":%zu,\"seconds\":%g,\"series\":%zu,"
                 "\"pairs\":%lld,\"quietest_pairs\":%lld,\"evalsha_us_per_pair\":%.3f,"
                 "\"evalsha_us_per_pair_median\":%.3f,\"command_us_per_pair\":%.3f,"
                 "\"cpu_us_per_pair\":%.3f,\"commands_per_pair\":%.3f,\"scripts_per_pair\":%.3f}\n",
                 v.what, HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH, keys, keys, seconds,
                 v.series.size(), pairs, q.pairs, q.script_us_per_pair(), median,
                 static_cast<double>(q.spent.command_usec) / n, q.spent.cpu_s * 1e6 / n,
                 static_cast<double>(q.spent.calls) / n,
                 static_cast<double>(q.spent.script_calls) / n);
}

}  // namespace

struct relay_result {
    std::vector<std::int64_t> handoffs;
    double held_fraction = 0;
};

/// Writes `args` to every context before reading any reply (a Redlock round, a release that
/// reaches every server at once), then reads one reply from each, the last written first: the
/// thread sleeps once, on the reply most likely to come last, and finds the others waiting (as
/// dlock's fan-out does), instead of waking for each. False if a connection failed or a server
/// answered an error (printed).
bool write_all_then_read(std::span<redisContext* const> to, const std::vector<std::string>& args) {
    for (auto* c : to) append_argv(c, args);
    for (auto* c : to) {
        int done = 0;
        while (!done) {
            if (redisBufferWrite(c, &done) != REDIS_OK) return false;
        }
    }
    bool ok = true;
    for (auto* c : std::views::reverse(to)) {
        void* r = nullptr;
        if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) return false;
        const auto* reply = static_cast<const redisReply*>(r);
        if (reply->type == REDIS_REPLY_ERROR) {
            std::fprintf(stderr, "dlock-bench-floor: %s: %.*s\n", args[0].c_str(),
                         static_cast<int>(reply->len), reply->str);
            ok = false;
        }
        freeReplyObject(r);
    }
    return ok;
}

/// The next message's payload on any of the subscriptions `subs`: a reply already read into a
/// context's buffer first, else poll(2) on all of them. One subscription: its blocking read. Empty
/// if a connection failed or nothing came within `timeout_ms`.
std::string next_message(const std::vector<redisContext*>& subs, int timeout_ms) {
    const auto payload = [](void* reply) {
        auto* r = static_cast<redisReply*>(reply);
        std::string what;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3)
            what.assign(r->element[2]->str, r->element[2]->len);
        freeReplyObject(r);
        return what;
    };
    if (subs.size() == 1) {
        void* reply = nullptr;
        if (redisGetReply(subs[0], &reply) != REDIS_OK || reply == nullptr) return {};
        return payload(reply);
    }
    std::vector<pollfd> fds;
    for (auto* sub : subs) fds.push_back({sub->fd, POLLIN, 0});
    for (;;) {
        for (auto* sub : subs) {
            void* reply = nullptr;
            if (redisGetReplyFromReader(sub, &reply) != REDIS_OK) return {};
            if (reply != nullptr) return payload(reply);
        }
        if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return {};
        for (std::size_t i = 0; i < fds.size(); ++i) {
            if (fds[i].revents != 0 && redisBufferRead(subs[i]) != REDIS_OK) return {};
        }
    }
}

/// The hand-off floor (the header's --relay-s and --relay-quorum): `workers` threads pass a turn
/// around a ring by PUBLISH, each holding it for `cs_ns` of busy-waiting. With several servers
/// (`connects`, one per server) the turn is PUBLISHed on every one and the next thread takes it
/// once a majority's messages came (a Redlock hand-off's floor: the release reaching a quorum, the
/// quorum's notifications reaching the waiter). `processes`: each member runs in a child process
/// of its own (forked after the connections are made), not in a thread. False (printed) if a
/// connection failed or a turn was taken twice or out of order.
/// kMinHandOff and kMinJoin, loaded (relay() with --relay-scripts). `pipelined`: the join is
/// written with the hand-off, not after its reply.
struct min_scripts {
    std::string hand_off_sha, join_sha;
    std::string hand_off_quorum_sha;  // kMinHandOffQuorum, for a relay on several servers
    bool pipelined = false;
};

/// Writes `commands` to `c` at once, then reads a reply to each. False if the connection failed
/// or a reply was an error (printed).
bool pipeline(redisContext* c, const std::vector<std::vector<std::string>>& commands) {
    for (const auto& args : commands) append_argv(c, args);
    bool ok = true;
    for (std::size_t i = 0; i < commands.size(); ++i) {
        void* r = nullptr;
        if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) return false;
        const auto* reply = static_cast<const redisReply*>(r);
        if (reply->type == REDIS_REPLY_ERROR) {
            std::fprintf(stderr, "dlock-bench-floor: %.*s\n", static_cast<int>(reply->len),
                         reply->str);
            ok = false;
        }
        freeReplyObject(r);
    }
    return ok;
}

bool relay(const std::vector<std::function<redisContext*()>>& connects, int workers,
           std::int64_t cs_ns, double seconds, relay_result& out,
           const min_scripts* scripted = nullptr, bool processes = false) {
    const std::string base = "dlock-floor-relay:" + std::to_string(now_ns()) + ":";
    const std::size_t majority = connects.size() / 2 + 1;
    struct member {
        std::vector<redisContext*> subs;  // one per server, SUBSCRIBEd to the member's channel
        std::vector<redisContext*> pubs;  // one per server, to PUBLISH the turn on
        std::vector<std::int64_t> handoffs;
        std::int64_t held_ns = 0;
        bool failed = false;
    };
    // A turn lost (a failed PUBLISH) ends every read within this, not never.
    const int read_timeout_s = 5 + static_cast<int>(seconds);
    std::vector<member> ring(static_cast<std::size_t>(workers));
    for (int i = 0; i < workers; ++i) {
        auto& m = ring[static_cast<std::size_t>(i)];
        for (const auto& connect : connects) {
            m.subs.push_back(connect());
            m.pubs.push_back(connect());
            if (m.subs.back() == nullptr || m.pubs.back() == nullptr) return false;
            redisSetTimeout(m.subs.back(), timeval{read_timeout_s, 0});
            if (!call(m.subs.back(), {"SUBSCRIBE", base + std::to_string(i)})) return false;
        }
    }
    const std::int64_t start = now_ns() + 100'000'000;  // every thread blocked in its read by then
    const std::int64_t end = start + static_cast<std::int64_t>(seconds * 1e9);
    // What the members share: in this process's memory for threads, in a shared mapping for
    // processes (each member then a child of its own, as W3's workers are).
    struct shared_state {
        std::atomic<long long> taken{0};  // the last turn taken
        std::atomic<std::int64_t> last_release{0};
    };
    // Lock-free, so that they work across processes in a shared mapping.
    static_assert(std::atomic<long long>::is_always_lock_free &&
                  std::atomic<std::int64_t>::is_always_lock_free);
    shared_state local;
    shared_state* shared = &local;
    if (processes) {
        void* p = mmap(nullptr, sizeof(shared_state), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return false;
        shared = new (p) shared_state{};
    }
    auto& taken = shared->taken;
    shared->last_release = start;
    const auto member_loop = [&](int i) {
        auto& m = ring[static_cast<std::size_t>(i)];
        const std::string next = base + std::to_string((i + 1) % workers);
        // A turn's message is "<turn> <release time>": the turn numbers the messages so that a
        // minority's late copies of an earlier turn are not counted for the next.
        long long turn = 0;
        const std::string me = "w" + std::to_string(i);
        const auto pass = [&](const std::string& what) {
            if (scripted == nullptr || what.rfind("stop:", 0) == 0) {
                if (!write_all_then_read(m.pubs, {"PUBLISH", next, what})) m.failed = true;
                return;
            }
            // One server: the owner is the thread's name; several: the turn's number
            // (kMinHandOffQuorum).
            const bool quorum = m.pubs.size() > 1;
            const long long passed = std::atoll(what.c_str());
            const std::vector<std::string> hand_off{
                "EVALSHA",
                quorum ? scripted->hand_off_quorum_sha : scripted->hand_off_sha,
                "2",
                base + "owner",
                base + "fence",
                quorum ? std::to_string(passed - 1) : me,
                quorum ? std::to_string(passed) : "w" + std::to_string((i + 1) % workers),
                next,
                what};
            const std::vector<std::string> join{"EVALSHA",      scripted->join_sha, "2",
                                                base + "queue", base + "owner",     me};
            // On several servers (Redlock's), each script goes to every one before any
            // reply is read, as the library's fan-out does.
            const bool ok = scripted->pipelined ? pipeline(m.pubs[0], {hand_off, join})
                                                : write_all_then_read(m.pubs, hand_off) &&
                                                      write_all_then_read(m.pubs, join);
            if (!ok) m.failed = true;
        };
        if (i == 0) {
            if (scripted != nullptr &&
                !write_all_then_read(m.pubs, {"SET", base + "owner", m.pubs.size() > 1 ? "0" : me}))
                m.failed = true;
            dlock_bench::sleep_until_ns(start);
            pass("1 " + std::to_string(now_ns()));
        }
        long long counting = 0;
        std::size_t copies = 0;
        for (;;) {
            const std::string what = next_message(m.subs, read_timeout_s * 1000);
            if (what.empty()) {
                m.failed = true;
                return;
            }
            const std::int64_t woke = now_ns();
            if (what.rfind("stop:", 0) == 0) {
                // Round the ring once, back to the one that stopped it (already gone).
                if (std::to_string((i + 1) % workers) != what.substr(5)) pass(what);
                return;
            }
            const long long t = std::atoll(what.c_str());
            if (t <= turn) continue;  // a late copy of a turn already taken
            if (t != counting) counting = t, copies = 0;
            if (++copies < majority) continue;
            turn = t;
            if (taken.exchange(t) != t - 1) {  // one turn at a time, each taken once
                std::fprintf(stderr, "dlock-bench-floor: relay: turn %lld taken out of order\n", t);
                m.failed = true;
                return;
            }
            if (woke >= end) {
                shared->last_release = woke;
                pass("stop:" + std::to_string(i));
                return;
            }
            m.handoffs.push_back(woke - std::atoll(what.c_str() + what.find(' ') + 1));
            const std::int64_t until = woke + cs_ns;
            while (now_ns() < until) {
            }
            m.held_ns += cs_ns;
            pass(std::to_string(turn + 1) + " " + std::to_string(now_ns()));
        }
    };
    if (!processes) {
        std::vector<std::thread> threads;
        for (int i = 0; i < workers; ++i) threads.emplace_back(member_loop, i);
        for (auto& t : threads) t.join();
    } else {
        // Each child runs one member and leaves its figures in a file of its own. A member that
        // could not be started fails the relay; the ones started end on their read timeout.
        std::vector<std::pair<pid_t, std::FILE*>> children;
        for (int i = 0; i < workers; ++i) {
            std::FILE* const results = std::tmpfile();
            const pid_t pid = results != nullptr ? fork() : -1;
            if (pid == 0) {
                member_loop(i);
                const auto& m = ring[static_cast<std::size_t>(i)];
                const std::int64_t head[3] = {m.failed ? 1 : 0, m.held_ns,
                                              static_cast<std::int64_t>(m.handoffs.size())};
                std::fwrite(head, sizeof head, 1, results);
                std::fwrite(m.handoffs.data(), sizeof(std::int64_t), m.handoffs.size(), results);
                std::fflush(results);
                _exit(0);
            }
            if (pid < 0) {
                std::fprintf(stderr, "dlock-bench-floor: relay: member %d not started\n", i);
                if (results != nullptr) std::fclose(results);
                ring[static_cast<std::size_t>(i)].failed = true;
                break;
            }
            children.emplace_back(pid, results);
        }
        for (std::size_t i = 0; i < children.size(); ++i) {
            const auto [pid, results] = children[i];
            auto& m = ring[i];
            int status = 0;
            std::int64_t head[3] = {1, 0, 0};
            // Only once the child is gone: it writes at the file offset a rewind would share.
            const bool exited = waitpid(pid, &status, 0) == pid && status == 0;
            if (exited) std::rewind(results);
            if (!exited || std::fread(head, sizeof head, 1, results) != 1) {
                std::fprintf(stderr,
                             "dlock-bench-floor: relay: member %zu's process failed or left no "
                             "figures\n",
                             i);
                head[0] = 1;
            }
            m.failed = head[0] != 0;
            m.held_ns = head[1];
            m.handoffs.resize(static_cast<std::size_t>(head[2]));
            if (std::fread(m.handoffs.data(), sizeof(std::int64_t), m.handoffs.size(), results) !=
                m.handoffs.size())
                m.failed = true;
            std::fclose(results);
        }
    }
    const std::int64_t last_release = shared->last_release;
    if (processes) munmap(shared, sizeof(shared_state));
    std::int64_t held = 0;
    bool ok = true;
    for (auto& m : ring) {
        ok = ok && !m.failed;
        out.handoffs.insert(out.handoffs.end(), m.handoffs.begin(), m.handoffs.end());
        held += m.held_ns;
        for (auto* c : m.subs) redisFree(c);
        for (auto* c : m.pubs) redisFree(c);
    }
    if (scripted != nullptr) {
        for (const auto& connect : connects) {
            if (redisContext* c = connect(); c != nullptr) {
                call(c, {"DEL", base + "owner", base + "fence", base + "queue"});
                redisFree(c);
            }
        }
    }
    if (!ok) std::fprintf(stderr, "dlock-bench-floor: relay: a connection failed\n");
    out.held_fraction = last_release > start
                            ? static_cast<double>(held) / static_cast<double>(last_release - start)
                            : 0;
    return ok;
}

/// --relay-scripts' "relay_handoff_fair_scripts" (the header): W3 on dlock's fair_acquire and
/// fair_release from `workers` bare threads on one server for `seconds`, empty critical section.
/// Each thread attempts (joining the queue when the lock is held), waits for the grant message
/// that names its token on its hand-off channel, then releases (a PING first, as the library
/// does after a wait) and attempts again. False (printed) if a connection failed or a script
/// answered an error.
bool relay_fair_scripts(const std::function<redisContext*()>& connect, int workers, double seconds,
                        relay_result& out) {
    const std::string lock = "dlock-floor-fair:" + std::to_string(now_ns());
    const std::string channel = lock + ":released";
    const std::vector<std::string> keys{lock, lock + ":fence", lock + ":queue", lock + ":alive",
                                        lock + ":arrivals"};
    std::string acquire_fn, release_fn;
    if (redisContext* c = connect(); c != nullptr) {
        acquire_fn = load_script(c, "fair_acquire");
        release_fn = load_script(c, "fair_release");
        redisFree(c);
    }
    if (acquire_fn.empty() || release_fn.empty()) return false;
    const int read_timeout_s = 5 + static_cast<int>(seconds);
    std::atomic<std::int64_t> released_at{0};  // the last release's write
    const std::int64_t start = now_ns() + 200'000'000;
    const std::int64_t end = start + static_cast<std::int64_t>(seconds * 1e9);
    std::vector<std::vector<std::int64_t>> handoffs(static_cast<std::size_t>(workers));
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < workers; ++i) {
        threads.emplace_back([&, i] {
            redisContext* c = connect();
            redisContext* sub = connect();
            // The library's token shape <kind>:<client>.<n>: grants go to
            // <channel>:<kind>:<client>.
            const std::string client = "fair:floor" + std::to_string(i);
            const auto run = [&] {
                if (c == nullptr || sub == nullptr) return false;
                redisSetTimeout(sub, timeval{read_timeout_s, 0});
                if (!call(sub, {"SUBSCRIBE", channel + ":" + client})) return false;
                dlock_bench::sleep_until_ns(start);
                for (long long n = 1;; ++n) {
                    const std::string token = client + "." + std::to_string(n);
                    std::vector<std::string> attempt{"FCALL", acquire_fn, "5"};
                    attempt.insert(attempt.end(), keys.begin(), keys.end());
                    // token, lease ms, count, limit, liveness ms, channel, reenter, ticket floor,
                    // waiter id, idle expiry ms, clock floor
                    for (const auto& a :
                         {token, std::string("30000"), std::string("1"), std::string("0"),
                          std::string("10000"), channel, std::string("0"), std::string("0"),
                          std::string(), std::string("60000"), std::string("1")})
                        attempt.push_back(a);
                    append_argv(c, attempt);
                    void* reply = nullptr;
                    if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) return false;
                    auto* r = static_cast<redisReply*>(reply);
                    const bool held = r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
                                      r->element[0]->type == REDIS_REPLY_INTEGER &&
                                      r->element[0]->integer == 1;
                    const bool queued = r->type == REDIS_REPLY_ARRAY && !held;
                    if (!held && !queued)
                        std::fprintf(stderr, "dlock-bench-floor: fair_acquire: %s\n",
                                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
                    freeReplyObject(r);
                    if (!held && !queued) return false;
                    if (queued) {
                        // "granted <fence> <ticket> <token>"
                        for (bool mine = false; !mine;) {
                            void* message = nullptr;
                            if (redisGetReply(sub, &message) != REDIS_OK || message == nullptr)
                                return false;
                            auto* m = static_cast<redisReply*>(message);
                            if (m->type == REDIS_REPLY_ARRAY && m->elements == 3) {
                                const std::string_view what(m->element[2]->str, m->element[2]->len);
                                mine = what.ends_with(" " + token);
                            }
                            freeReplyObject(m);
                        }
                        handoffs[static_cast<std::size_t>(i)].push_back(now_ns() - released_at);
                    }
                    const bool last = now_ns() >= end;
                    std::vector<std::string> release{"FCALL", release_fn, "5"};
                    release.insert(release.end(), keys.begin(), keys.end());
                    // token, channel, hand-off lease ms, whole, idle expiry ms, waiter id, clock
                    // floor
                    for (const auto& a : {token, channel, std::string("2000"), std::string("0"),
                                          std::string("60000"), std::string(), std::string("1")})
                        release.push_back(a);
                    released_at = now_ns();
                    if (queued) redisAppendCommand(c, "PING");
                    append_argv(c, release);
                    for (int k = queued ? 2 : 1; k > 0; --k) {
                        reply = nullptr;
                        if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) return false;
                        auto* rr = static_cast<redisReply*>(reply);
                        const bool bad = k == 1 && rr->type != REDIS_REPLY_INTEGER;
                        if (bad)
                            std::fprintf(
                                stderr, "dlock-bench-floor: fair_release: %s\n",
                                rr->type == REDIS_REPLY_ERROR ? rr->str : "unexpected reply");
                        freeReplyObject(rr);
                        if (bad) return false;
                    }
                    if (last) return true;
                }
            };
            if (!run()) failed = true;
            if (c != nullptr) redisFree(c);
            if (sub != nullptr) redisFree(sub);
        });
    }
    for (auto& t : threads) t.join();
    for (const auto& h : handoffs) out.handoffs.insert(out.handoffs.end(), h.begin(), h.end());
    if (redisContext* c = connect(); c != nullptr) {
        std::vector<std::string> del{"DEL"};
        del.insert(del.end(), keys.begin(), keys.end());
        call(c, del);
        redisFree(c);
    }
    if (failed) std::fprintf(stderr, "dlock-bench-floor: fair-scripts relay failed\n");
    return !failed;
}

int main(int argc, char** argv) {
    std::string server;
    std::vector<std::string> all_servers;
    std::string out;
    double duration_s = 2.0;
    long long max_ops = 200'000;
    long long warmup = 2'000;
    double reference_s = 0;     // > 0: also time the references, interleaved with the PINGs
    double gap_ms = 0;          // > 0: the probe, one PING every gap_ms (floor under load)
    long long start_at_ns = 0;  // > 0: the timed PINGs start then (CLOCK_MONOTONIC)
    double server_cost_s = 0;   // > 0: then the server-cost op, this long
    double relay_s = 0;         // > 0: then the hand-off floor, this long
    int relay_workers = 8;
    long long relay_cs_us = 1000;
    int relay_quorum = 0;   // >= 3: then the empty-critical-section relays on 1 and on this many
    int relay_scripts = 0;  // 1: then the scripted relays (the header's --relay-scripts)
    int relay_procs = 0;    // 1: then the relays again with a process per member
    std::vector<int> relay_scale;  // then the least scripts' relay between this many processes
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
        else if (a == "--gap-ms")
            gap_ms = std::atof(std::string(v).c_str());
        else if (a == "--start-at-ns")
            start_at_ns = std::atoll(std::string(v).c_str());
        else if (a == "--server-cost-s")
            server_cost_s = std::atof(std::string(v).c_str());
        else if (a == "--relay-s")
            relay_s = std::atof(std::string(v).c_str());
        else if (a == "--relay-workers")
            relay_workers = std::atoi(std::string(v).c_str());
        else if (a == "--relay-cs-us")
            relay_cs_us = std::atoll(std::string(v).c_str());
        else if (a == "--relay-quorum")
            relay_quorum = std::atoi(std::string(v).c_str());
        else if (a == "--relay-scripts")
            relay_scripts = std::atoi(std::string(v).c_str());
        else if (a == "--relay-procs")
            relay_procs = std::atoi(std::string(v).c_str());
        else if (a == "--relay-scale") {
            for (std::size_t at = 0; at <= v.size();) {
                const std::size_t comma = std::min(v.find(',', at), v.size());
                relay_scale.push_back(std::atoi(std::string(v.substr(at, comma - at)).c_str()));
                at = comma + 1;
            }
        } else
            usage("unknown option");
    }
    if (server.empty() || out.empty() || server.rfind(':') == std::string::npos) {
        usage("--servers and --out are required");
    }
    if (gap_ms < 0 || start_at_ns < 0) usage("--gap-ms and --start-at-ns must be >= 0");
    if (gap_ms > 0 && reference_s > 0) usage("--gap-ms (the probe) does not go with --reference-s");
    if (server_cost_s < 0) usage("--server-cost-s must be >= 0");
    if (relay_s < 0 || relay_workers < 2 || relay_workers > 256 || relay_cs_us < 0)
        usage("--relay-s must be >= 0, --relay-workers in [2, 256], --relay-cs-us >= 0");
    if (gap_ms > 0 && relay_s > 0) usage("--gap-ms (the probe) does not go with --relay-s");
    if (relay_quorum != 0 &&
        (relay_s <= 0 || relay_quorum < 3 || relay_quorum > static_cast<int>(all_servers.size())))
        usage("--relay-quorum N needs --relay-s and N in [3, the number of --servers]");
    if ((relay_scripts != 0 && relay_scripts != 1) || (relay_scripts == 1 && relay_s <= 0))
        usage("--relay-scripts is 0 or 1, and 1 needs --relay-s");
    if ((relay_procs != 0 && relay_procs != 1) || (relay_procs == 1 && relay_s <= 0))
        usage("--relay-procs is 0 or 1, and 1 needs --relay-s");
    if (!relay_scale.empty() && (relay_procs != 1 || relay_scripts != 1 ||
                                 std::any_of(relay_scale.begin(), relay_scale.end(),
                                             [](int n) { return n < 2 || n > 256; })))
        usage("--relay-scale needs --relay-procs 1 and --relay-scripts 1, each N in [2, 256]");
    if (gap_ms > 0 && server_cost_s > 0) {
        usage("--gap-ms (the probe) does not go with --server-cost-s");
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
    std::string acquire_fn;
    std::string release_fn;
    const bool references = reference_s > 0;
    if (references) {
        acquire_fn = load_script(c, "acquire");
        release_fn = load_script(c, "release");
        if (acquire_fn.empty() || release_fn.empty()) return 1;
    }
    const auto script_calls = mutex_script_calls("FCALL", acquire_fn, release_fn, lock, token);
    struct reference {
        std::string what;
        std::vector<std::int64_t> rtt;
    };
    std::vector<std::int64_t> rtt;
    rtt.reserve(static_cast<std::size_t>(max_ops));
    reference set_nx{"set_nx_px", {}};
    reference multi{"multi_set_incr", {}};
    reference acq{"acquire_script", {}};
    reference rel{"release_script", {}};
    // Per fan-out width: a PING, and dlock's acquire script, written to the first n servers at
    // once (write_all_then_read).
    struct fan_references {
        std::size_t n;
        reference ping, acquire;
    };
    const std::vector<std::string> ping_args{"PING"};
    std::vector<fan_references> fans;
    for (const std::size_t n : {3, 5}) {
        if (fan.size() < n) break;
        const auto width = std::to_string(n);
        fans.push_back({n, {"fanout_ping_" + width, {}}, {"fanout_acquire_" + width, {}}});
    }
    // The scripts on every fan-out server (the same SHA-1 everywhere).
    for (auto* f : fan) {
        if (load_script(f, "acquire") != acquire_fn || load_script(f, "release") != release_fn)
            return 1;
    }
    if (start_at_ns > 0) dlock_bench::sleep_until_ns(start_at_ns);
    const std::int64_t deadline =
        now_ns() + static_cast<std::int64_t>(
                       (references ? std::max(duration_s, reference_s) : duration_s) * 1e9);
    dlock_bench::pacer pace(static_cast<std::int64_t>(gap_ms * 1e6));
    while (static_cast<long long>(rtt.size()) < max_ops && now_ns() < deadline) {
        pace.wait();
        std::int64_t t0 = now_ns();
        if (!ping(c)) {
            std::fprintf(stderr, "dlock-bench-floor: PING failed: %s\n", c->errstr);
            return 1;
        }
        rtt.push_back(now_ns() - t0);
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
        if (!call(c, script_calls.first)) return 1;
        acq.rtt.push_back(now_ns() - t0);
        t0 = now_ns();
        if (!call(c, script_calls.second)) return 1;
        rel.rtt.push_back(now_ns() - t0);

        for (auto& f : fans) {
            t0 = now_ns();
            if (!write_all_then_read({fan.data(), f.n}, ping_args)) return 1;
            f.ping.rtt.push_back(now_ns() - t0);
        }
        // dlock's acquire script on all n at once (the lock free on each), then an untimed release.
        for (auto& f : fans) {
            t0 = now_ns();
            if (!write_all_then_read({fan.data(), f.n}, script_calls.first)) return 1;
            f.acquire.rtt.push_back(now_ns() - t0);
            if (!write_all_then_read({fan.data(), f.n}, script_calls.second)) return 1;
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
        for (auto& f : fans) refs.push_back(std::move(f.ping));
        for (auto& f : fans) refs.push_back(std::move(f.acquire));
    }
    // The server-cost op, on the now quiet server: the variants alternate in short series so
    // that both see the same load.
    std::vector<cost_variant> costs;
    std::vector<std::string> cost_locks;
    if (server_cost_s > 0) {
        costs.push_back({"bare_scripts",
                         "EVALSHA",
                         load_text(c, "bare acquire", kBareAcquire),
                         load_text(c, "bare release", kBareRelease),
                         {}});
        costs.push_back(
            {"dlock_scripts", "FCALL", load_script(c, "acquire"), load_script(c, "release"), {}});
        for (const auto& v : costs) {
            if (v.acquire_fn.empty() || v.release_fn.empty()) return 1;
        }
        for (int i = 0; i < 8; ++i) cost_locks.push_back(lock + ":pair" + std::to_string(i));
        constexpr int rounds = 8;
        for (int round = 0; round < rounds; ++round) {
            for (auto& v : costs) {
                if (!run_pairs(c, v, cost_locks, token, server_cost_s / (2 * rounds))) return 1;
            }
        }
        for (const auto& l : cost_locks) call(c, {"DEL", l, l + ":fence"});
    }
    redisFree(c);
    relay_result relayed;
    std::vector<std::function<redisContext*()>> relay_servers;
    for (const auto& s : all_servers)
        relay_servers.emplace_back([&connect, s] { return connect(s); });
    relay_result relayed_procs;
    if (relay_procs == 1 && !relay({relay_servers[0]}, relay_workers, relay_cs_us * 1000, relay_s,
                                   relayed_procs, nullptr, true))
        return 1;
    if (relay_s > 0 &&
        !relay({relay_servers[0]}, relay_workers, relay_cs_us * 1000, relay_s, relayed)) {
        return 1;
    }
    // W3's hand-off floors (empty critical section): on one server, and on relay_quorum servers
    // with the turn taken at a majority of their messages (Redlock's).
    std::vector<std::pair<std::string, relay_result>> quorum_relays;
    if (relay_quorum > 0) {
        for (const int n : {1, relay_quorum}) {
            relay_result r;
            const std::vector<std::function<redisContext*()>> on(relay_servers.begin(),
                                                                 relay_servers.begin() + n);
            if (!relay(on, relay_workers, 0, relay_s, r)) return 1;
            quorum_relays.emplace_back(
                "relay_handoff_" + std::to_string(n / 2 + 1) + "of" + std::to_string(n),
                std::move(r));
        }
    }

    // The scripted relays (empty critical section, first server): the least scripts, then dlock's.
    if (relay_scripts == 1) {
        // Loaded on every server a scripted relay runs on (the same text, the same SHA-1).
        min_scripts least;
        const std::size_t on_servers =
            relay_quorum > 0 ? static_cast<std::size_t>(relay_quorum) : 1;
        for (std::size_t i = 0; i < on_servers; ++i) {
            if (redisContext* lc = relay_servers[i](); lc != nullptr) {
                least.hand_off_sha = load_text(lc, "the least hand-off", kMinHandOff);
                least.join_sha = load_text(lc, "the least join", kMinJoin);
                if (relay_quorum > 0) {
                    least.hand_off_quorum_sha =
                        load_text(lc, "the least hand-off on a quorum", kMinHandOffQuorum);
                }
                redisFree(lc);
            }
            if (least.hand_off_sha.empty() || least.join_sha.empty() ||
                (relay_quorum > 0 && least.hand_off_quorum_sha.empty()))
                return 1;
        }
        for (const bool pipelined : {false, true}) {
            least.pipelined = pipelined;
            relay_result r;
            if (!relay({relay_servers[0]}, relay_workers, 0, relay_s, r, &least)) return 1;
            quorum_relays.emplace_back(
                pipelined ? "relay_handoff_min_pipelined" : "relay_handoff_min_scripts",
                std::move(r));
        }
        if (relay_procs == 1) {
            least.pipelined = false;
            relay_result r;
            if (!relay({relay_servers[0]}, relay_workers, 0, relay_s, r, &least, true)) return 1;
            // It is also the scale relay of as many processes (--relay-scale), not run twice.
            if (std::ranges::find(relay_scale, relay_workers) != relay_scale.end())
                quorum_relays.emplace_back(
                    "relay_handoff_min_scripts_procs_" + std::to_string(relay_workers), r);
            quorum_relays.emplace_back("relay_handoff_min_scripts_procs", std::move(r));
        }
        for (const int n : relay_scale) {
            if (n == relay_workers) continue;
            least.pipelined = false;
            relay_result r;
            if (!relay({relay_servers[0]}, n, 0, relay_s, r, &least, true)) return 1;
            quorum_relays.emplace_back("relay_handoff_min_scripts_procs_" + std::to_string(n),
                                       std::move(r));
        }
        relay_result f;
        if (!relay_fair_scripts(relay_servers[0], relay_workers, relay_s, f)) return 1;
        quorum_relays.emplace_back("relay_handoff_fair_scripts", std::move(f));
        if (relay_quorum > 0) {
            least.pipelined = false;
            relay_result q;
            const std::vector<std::function<redisContext*()>> on(
                relay_servers.begin(), relay_servers.begin() + relay_quorum);
            if (!relay(on, relay_workers, 0, relay_s, q, &least)) return 1;
            const std::string name = "relay_handoff_min_scripts_" +
                                     std::to_string(relay_quorum / 2 + 1) + "of" +
                                     std::to_string(relay_quorum);
            quorum_relays.emplace_back(name, std::move(q));
            if (relay_procs == 1) {
                relay_result qp;
                if (!relay(on, relay_workers, 0, relay_s, qp, &least, true)) return 1;
                quorum_relays.emplace_back(name + "_procs", std::move(qp));
            }
        }
    }

    const std::string tmp = out + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
        std::perror(tmp.c_str());
        return 1;
    }
    for (const auto v : rtt) std::fprintf(f, "{\"rtt_ns\":%lld}\n", static_cast<long long>(v));
    for (const auto& r : refs) print_summary(f, "summary", r.what.c_str(), summarise(r.rtt));
    for (const auto& v : costs) print_cost(f, v, cost_locks.size(), server_cost_s / 2);
    if (relay_s > 0) {
        print_summary(f, "summary", "relay_handoff", summarise(relayed.handoffs));
        std::fprintf(f,
                     "{\"event\":\"relay\",\"workers\":%d,\"cs_us\":%lld,\"held_fraction\":%.4f}\n",
                     relay_workers, relay_cs_us, relayed.held_fraction);
    }
    if (relay_procs == 1) {
        print_summary(f, "summary", "relay_handoff_procs", summarise(relayed_procs.handoffs));
        std::fprintf(f,
                     "{\"event\":\"relay_procs\",\"workers\":%d,\"cs_us\":%lld,"
                     "\"held_fraction\":%.4f}\n",
                     relay_workers, relay_cs_us, relayed_procs.held_fraction);
    }
    for (const auto& [what, r] : quorum_relays)
        print_summary(f, "summary", what.c_str(), summarise(r.handoffs));
    print_summary(f, "done", "redis_ping", summarise(rtt));
    if (std::fclose(f) != 0 || std::rename(tmp.c_str(), out.c_str()) != 0) {
        std::perror(out.c_str());
        return 1;
    }
    return 0;
}
