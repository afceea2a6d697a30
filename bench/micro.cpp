// dlock-bench-micro: Google Benchmark suite of the client's I/O-free core, so its own CPU cost per
// lock operation stays visible next to the network round trip it waits for (a loopback PING is
// ~30-40 µs here; everything below should be a small fraction of that).
//
// It reaches into src/ (dlock::detail, dlock::redis::detail) on purpose: these are the pieces a
// lock operation runs on every call. One acquire = random_token + append_command(EVALSHA ...) +
// decoding a 2-element array reply; one release = append_command + decoding an integer; one
// renewal pass = lease_to_request + valid_until + next_renewal_at per lease plus the pipeline.
//
//   build/bench/dlock-bench-micro [--benchmark_filter=...] [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/renewal.hpp"
#include "core/token.hpp"
#include "redis/url.hpp"
#include "redis/codec.hpp"

namespace {

using namespace std::chrono_literals;
namespace core = dlock::detail;
namespace codec = dlock::redis::detail;

// --- tokens --------------------------------------------------------------------------------

void bm_random_token(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(core::random_token());
}
BENCHMARK(bm_random_token);

void bm_random_jitter(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(core::random_jitter_ns(2'000'000));
}
BENCHMARK(bm_random_jitter);

// --- RESP encoding -------------------------------------------------------------------------

// What an acquire sends: EVALSHA <sha1> 2 <lock key> <fence key> <token> <lease ms>.
const std::string sha1 = "4c5b0a3e5c0ab9e16a1c4c9e8e1b9b6f2d7d3f11";
const std::string lock_key = "dlock:{orders/sku-42}";
const std::string fence_key = "dlock:{orders/sku-42}:fence";
const std::string token = "0123456789abcdef0123456789abcdef";

void bm_append_command_acquire(benchmark::State& state) {
    std::string out;
    out.reserve(256);
    for (auto _ : state) {
        out.clear();
        codec::append_command(out, {"EVALSHA", sha1, "2", lock_key, fence_key, token, "10000"});
        benchmark::DoNotOptimize(out.data());
    }
}
BENCHMARK(bm_append_command_acquire);

void bm_append_command_release(benchmark::State& state) {
    const std::string channel = lock_key + ":released";
    std::string out;
    out.reserve(256);
    for (auto _ : state) {
        out.clear();
        codec::append_command(out, {"EVALSHA", sha1, "1", lock_key, token, channel});
        benchmark::DoNotOptimize(out.data());
    }
}
BENCHMARK(bm_append_command_release);

// --- RESP decoding -------------------------------------------------------------------------

void decode_loop(benchmark::State& state, std::string_view bytes, std::size_t replies_per_feed) {
    codec::reply_decoder decoder;
    dlock::redis::reply r;
    std::error_code ec;
    for (auto _ : state) {
        decoder.feed(bytes, ec);
        for (std::size_t i = 0; i < replies_per_feed; ++i) {
            if (!decoder.next(r, ec)) state.SkipWithError("incomplete reply");
            benchmark::DoNotOptimize(r);
        }
    }
    if (ec) state.SkipWithError("decode error");
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes.size()));
}

void bm_decode_acquire_granted(benchmark::State& state) {
    decode_loop(state, "*2\r\n:1\r\n:1042\r\n", 1);
}
BENCHMARK(bm_decode_acquire_granted);

void bm_decode_acquire_held(benchmark::State& state) {
    decode_loop(state, "*2\r\n:0\r\n:9873\r\n", 1);
}
BENCHMARK(bm_decode_acquire_held);

void bm_decode_release(benchmark::State& state) { decode_loop(state, ":1\r\n", 1); }
BENCHMARK(bm_decode_release);

void bm_decode_pubsub_message(benchmark::State& state) {
    decode_loop(
        state, "*3\r\n$7\r\nmessage\r\n$30\r\ndlock:{orders/sku-42}:released\r\n$8\r\nreleased\r\n",
        1);
}
BENCHMARK(bm_decode_pubsub_message);

// A renewal pipeline's answer: N integer replies in one read.
void bm_decode_renew_batch(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    std::string bytes;
    for (std::size_t i = 0; i < n; ++i) bytes += ":1\r\n";
    decode_loop(state, bytes, n);
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(bm_decode_renew_batch)->Arg(100)->Arg(1000);

// --- validity and renewal math (src/core/renewal.hpp) --------------------------------------

void bm_renewal_math(benchmark::State& state) {
    const dlock::lock_options options{.lease = 3s, .renew_every = 1s, .max_hold = 1h};
    const auto plan = core::make_renewal_plan(options);
    auto now = core::steady::now();
    const auto granted = now;
    for (auto _ : state) {
        now += 1ms;
        const auto request = core::lease_to_request(plan, granted, now);
        benchmark::DoNotOptimize(request);
        benchmark::DoNotOptimize(core::valid_until(now, request.value_or(plan.lease)));
        benchmark::DoNotOptimize(core::next_renewal_at(plan, granted, now));
    }
}
BENCHMARK(bm_renewal_math);

void bm_make_renewal_plan(benchmark::State& state) {
    const dlock::lock_options options{.lease = 10s};
    for (auto _ : state) benchmark::DoNotOptimize(core::make_renewal_plan(options));
}
BENCHMARK(bm_make_renewal_plan);

// --- URL parsing (once per client) ---------------------------------------------------------

void bm_parse_url_plain(benchmark::State& state) {
    std::error_code ec;
    for (auto _ : state)
        benchmark::DoNotOptimize(core::parse_redis_url("redis://127.0.0.1:6379", ec));
}
BENCHMARK(bm_parse_url_plain);

void bm_parse_url_full(benchmark::State& state) {
    std::error_code ec;
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            core::parse_redis_url("redis://app%40eu:s3cr%2Ft@[::1]:6380/3", ec));
    }
}
BENCHMARK(bm_parse_url_full);

}  // namespace

BENCHMARK_MAIN();
