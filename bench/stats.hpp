// Shared by the floor programs (and the worker's clock): CLOCK_MONOTONIC nanoseconds as
// the worker protocol requires (docs/benchmarks.md), nearest-rank percentiles, and the summary
// record the analyser reads.
#pragma once

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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

}  // namespace dlock_bench
