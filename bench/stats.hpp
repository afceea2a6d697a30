// Shared by the floor programs (and the worker's clock): CLOCK_MONOTONIC nanoseconds as
// the worker protocol requires (docs/benchmarks.md), nearest-rank percentiles, the summary
// record the analyser reads, the floor programs' timing loop, their probe's pacing and their
// output file.
#pragma once

#include <time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dlock_bench {

inline std::int64_t now_ns() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Sleeps until CLOCK_MONOTONIC reads `t` nanoseconds (at once if it already does).
inline void sleep_until_ns(std::int64_t t) noexcept {
    const timespec ts{static_cast<time_t>(t / 1'000'000'000), static_cast<long>(t % 1'000'000'000)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
}

/// The pace of a floor program's probe (--gap-ms: the round trip under a workload's load, from a
/// separate process, docs/benchmarks.md): wait() returns at most once every `gap_ns`, on a fixed
/// schedule from its first call, so the probe adds one operation per gap to the load whatever the
/// round trips take; an operation that overran its slot moves the schedule on instead of bringing
/// a burst of catch-up operations. A gap <= 0 never waits.
class pacer {
public:
    explicit pacer(std::int64_t gap_ns) noexcept : gap_(gap_ns) {}
    void wait() noexcept {
        if (gap_ <= 0) return;
        std::int64_t t = now_ns();
        if (next_ > t) {
            sleep_until_ns(next_);
            t = next_;
        }
        next_ = t + gap_;
    }

private:
    std::int64_t gap_;
    std::int64_t next_ = 0;
};

inline std::int64_t nearest_rank(const std::vector<std::int64_t>& sorted, double p) {
    if (sorted.empty()) return 0;
    auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
    rank = std::clamp<std::size_t>(rank, 1, sorted.size());
    return sorted[rank - 1];
}

struct summary {
    std::size_t n = 0;
    std::int64_t p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

inline summary summarise(std::vector<std::int64_t> v) {
    std::sort(v.begin(), v.end());
    summary s;
    s.n = v.size();
    if (v.empty()) return s;
    long double sum = 0;
    for (const auto x : v) sum += static_cast<long double>(x);
    s.p50 = nearest_rank(v, 50);
    s.p90 = nearest_rank(v, 90);
    s.p99 = nearest_rank(v, 99);
    s.max = v.back();
    s.mean = static_cast<std::int64_t>(sum / static_cast<long double>(v.size()));
    return s;
}

/// One JSON line: {"event":..., "what":..., "client":..., "n":..., "p50_ns":..., ...}.
inline void print_summary(std::FILE* f, const char* event, const char* what, const char* client,
                          const summary& s) {
    std::fprintf(
        f,
        "{\"event\":\"%s\",\"what\":\"%s\",\"client\":\"%s\",\"n\":%zu,"
        "\"p50_ns\":%lld,\"p90_ns\":%lld,\"p99_ns\":%lld,\"max_ns\":%lld,\"mean_ns\":%lld}\n",
        event, what, client, s.n, static_cast<long long>(s.p50), static_cast<long long>(s.p90),
        static_cast<long long>(s.p99), static_cast<long long>(s.max),
        static_cast<long long>(s.mean));
}

/// The round trips a floor program (floor_zk.cpp, floor_etcd.cpp) records, in nanoseconds: a read,
/// and a lock-shaped write pair (take, then release) as its two halves and as a whole.
struct floor_samples {
    std::vector<std::int64_t> read, take, release, pair;
};

/// The probe's loop (--gap-ms: the round trip under a workload's load, docs/benchmarks.md) of the
/// floor programs floor_zk.cpp and floor_etcd.cpp: from CLOCK_MONOTONIC `start_at_ns` (at once if
/// 0) for `duration_s` seconds, one operation every `gap_ms` on the pacer's schedule, the
/// operations `ops` in turn, at most `max_turns` turns. Whole turns only: a turn begun runs to its
/// end, so a node or key its first operation made is gone again after its last. The round trip of
/// operation k goes to `out[k]`. Each operation returns false on an error, which ends the loop:
/// then run_probe returns false.
template <std::size_t N, class Op>
bool run_probe(long long start_at_ns, double duration_s, double gap_ms, long long max_turns,
               const std::array<Op, N>& ops, std::array<std::vector<std::int64_t>, N>& out) {
    if (start_at_ns > 0) sleep_until_ns(start_at_ns);
    const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(duration_s * 1e9);
    pacer pace(static_cast<std::int64_t>(gap_ms * 1e6));
    for (long long turn = 0; turn < max_turns && now_ns() < deadline; ++turn) {
        for (std::size_t k = 0; k < N; ++k) {
            pace.wait();
            const std::int64_t t0 = now_ns();
            if (!ops[k]()) return false;
            out[k].push_back(now_ns() - t0);
        }
    }
    return true;
}

/// The floor programs' loop: blocks of `block_ms` of reads only, then of write pairs only, and so
/// on, so that both see the same machine load while a read seldom follows a write; `warmup_s`
/// seconds of such blocks unrecorded, then recorded ones until `duration_s` seconds or `max_ops`
/// of each kind. `read()` makes one read; `take()` and `release()` the two writes of a pair;
/// `between()` runs after each block of writes (for a read that needs something written). Each
/// returns false on an error, which ends the loop: then run_floor_blocks returns false.
template <class Read, class Take, class Release, class Between>
bool run_floor_blocks(double warmup_s, double duration_s, long long max_ops, long long block_ms,
                      floor_samples& out, Read&& read, Take&& take, Release&& release,
                      Between&& between) {
    const auto cap = static_cast<std::size_t>(std::min<long long>(max_ops, 200'000));
    for (auto* v : {&out.read, &out.take, &out.release, &out.pair}) v->reserve(cap);
    const auto full = [&](const std::vector<std::int64_t>& v) {
        return static_cast<long long>(v.size()) >= max_ops;
    };
    const std::int64_t block_ns = block_ms * 1'000'000;
    const std::int64_t warm_end = now_ns() + static_cast<std::int64_t>(warmup_s * 1e9);
    std::int64_t deadline = 0;
    for (bool measured = false;;) {
        const std::int64_t t = now_ns();
        if (!measured && t >= warm_end) {
            measured = true;
            deadline = t + static_cast<std::int64_t>(duration_s * 1e9);
        }
        if (measured && (t >= deadline || (full(out.read) && full(out.pair)))) return true;
        // Each block ends early at the end of its phase.
        const std::int64_t phase_end = measured ? deadline : warm_end;
        std::int64_t block_end = std::min(t + block_ns, phase_end);
        do {
            if (measured && full(out.read)) break;
            const std::int64_t t0 = now_ns();
            if (!read()) return false;
            if (measured) out.read.push_back(now_ns() - t0);
        } while (now_ns() < block_end);
        block_end = std::min(now_ns() + block_ns, phase_end);
        do {
            if (measured && full(out.pair)) break;
            const std::int64_t t0 = now_ns();
            if (!take()) return false;
            const std::int64_t t1 = now_ns();
            if (!release()) return false;
            const std::int64_t t2 = now_ns();
            if (measured) {
                out.take.push_back(t1 - t0);
                out.release.push_back(t2 - t1);
                out.pair.push_back(t2 - t0);
            }
        } while (now_ns() < block_end);
        if (!between()) return false;
    }
}

/// One kind of operation a floor program timed: its name in FILE and its round trips.
struct named_samples {
    const char* what;
    const std::vector<std::int64_t>* rtt;
};

/// Writes a floor program's FILE (docs/benchmarks.md): one {"what":W,"rtt_ns":N} per operation
/// of every series, a summary record of each series but the first, and the first's summary as the
/// "done" record last. Written to FILE.tmp and renamed, so a reader never sees half a file.
/// Returns 0, or 1 after printing why to stderr.
inline int write_samples_file(const std::string& path, const std::string& client,
                              const std::vector<named_samples>& series) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
        std::perror(tmp.c_str());
        return 1;
    }
    for (const auto& s : series)
        for (const auto x : *s.rtt)
            std::fprintf(f, "{\"what\":\"%s\",\"rtt_ns\":%lld}\n", s.what,
                         static_cast<long long>(x));
    for (std::size_t i = 1; i < series.size(); ++i)
        print_summary(f, "summary", series[i].what, client.c_str(), summarise(*series[i].rtt));
    if (!series.empty())
        print_summary(f, "done", series[0].what, client.c_str(), summarise(*series[0].rtt));
    if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::perror(path.c_str());
        return 1;
    }
    return 0;
}

/// write_samples_file of a floor program's blocks: the operations under the names `what` (read,
/// take, release, pair), the read's summary as the "done" record.
inline int write_floor_file(const std::string& path, const std::string& client,
                            const char* const (&what)[4], const floor_samples& s) {
    return write_samples_file(
        path, client,
        {{what[0], &s.read}, {what[1], &s.take}, {what[2], &s.release}, {what[3], &s.pair}});
}

}  // namespace dlock_bench
