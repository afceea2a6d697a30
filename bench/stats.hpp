// Shared by the floor programs (and the worker's clock): CLOCK_MONOTONIC nanoseconds as
// the worker protocol requires (docs/benchmarks.md), nearest-rank percentiles, the summary
// record the analyser reads, and the floor programs' timing loop and output file.
#pragma once

#include <time.h>

#include <algorithm>
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

/// Writes a floor program's FILE (docs/benchmarks.md): one {"what":W,"rtt_ns":N} per operation
/// under the names `what` (read, take, release, pair), the summary records of the three writes,
/// and the read's summary as the "done" record last. Written to FILE.tmp and renamed, so a reader
/// never sees half a file. Returns 0, or 1 after printing why to stderr.
inline int write_floor_file(const std::string& path, const std::string& client,
                            const char* const (&what)[4], const floor_samples& s) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
        std::perror(tmp.c_str());
        return 1;
    }
    const std::vector<std::int64_t>* all[] = {&s.read, &s.take, &s.release, &s.pair};
    for (int i = 0; i < 4; ++i)
        for (const auto x : *all[i])
            std::fprintf(f, "{\"what\":\"%s\",\"rtt_ns\":%lld}\n", what[i],
                         static_cast<long long>(x));
    for (int i = 1; i < 4; ++i)
        print_summary(f, "summary", what[i], client.c_str(), summarise(*all[i]));
    print_summary(f, "done", what[0], client.c_str(), summarise(s.read));
    if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::perror(path.c_str());
        return 1;
    }
    return 0;
}

}  // namespace dlock_bench
