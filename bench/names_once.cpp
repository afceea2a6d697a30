// dlock-bench-names-once: what many lock names used once leave on a Redis server (keys and
// memory), right after use and once the idle period has passed (docs/redis-lock.md, "Fencing
// tokens and key expiry").
//
// One dlock::redis::client with client_options::idle_expiry = --idle-expiry-ms takes and releases
// --names distinct exclusive locks (default 1,000,000), each once, from --threads threads
// (acquire with wait 0 and release: two round trips per name through the library's API). It
// reads DBSIZE and INFO memory's used_memory before, right after, and then every second until
// DBSIZE is back to its first value or --settle-s seconds have passed since the last lock.
// Run it against a private server: DBSIZE counts every key.
//
//   dlock-bench-names-once --url redis://127.0.0.1:PORT [--names N] [--threads T]
//                          [--idle-expiry-ms MS] [--lease-ms L] [--settle-s S]
//
// Prints one JSON object per phase (before, after, settled) and a final {"event":"done"} line.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "dlock-bench-names-once: %s\nusage: dlock-bench-names-once --url URL [--names N] "
                 "[--threads T] [--idle-expiry-ms MS] [--lease-ms L] [--settle-s S]\n",
                 why.c_str());
    std::exit(64);
}

long long number(const std::string& option, const std::string& v) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1) usage(option + " " + v + ": not a positive number");
    return n;
}

long long used_memory(dlock::redis::client& redis) {
    const auto info = redis.command({"INFO", "memory"}).text;
    const auto at = info.find("used_memory:");
    return at == std::string::npos ? -1 : std::atoll(info.c_str() + at + 12);
}

nlohmann::json sample(dlock::redis::client& redis, const char* phase, steady::time_point start) {
    return {{"event", phase},
            {"dbsize", redis.command({"DBSIZE"}).integer},
            {"used_memory", used_memory(redis)},
            {"s", std::chrono::duration<double>(steady::now() - start).count()}};
}

}  // namespace

int main(int argc, char** argv) {
    std::string url;
    long long names = 1'000'000;
    long long threads = 8;
    long long idle_ms = 60'000;
    long long lease_ms = 10'000;
    long long settle_s = 600;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (i + 1 >= argc) usage("option " + std::string(a) + " without value");
        const std::string v = argv[++i];
        if (a == "--url")
            url = v;
        else if (a == "--names")
            names = number("--names", v);
        else if (a == "--threads")
            threads = number("--threads", v);
        else if (a == "--idle-expiry-ms")
            idle_ms = number("--idle-expiry-ms", v);
        else if (a == "--lease-ms")
            lease_ms = number("--lease-ms", v);
        else if (a == "--settle-s")
            settle_s = number("--settle-s", v);
        else
            usage("unknown option " + std::string(a));
    }
    if (url.empty()) usage("--url is required");

    std::atomic<long long> failures{0};
    dlock::redis::client redis(
        {.url = url,
         .key_prefix = "names-once",
         .error_handler = [&](std::error_code, std::string_view) { failures.fetch_add(1); },
         .idle_expiry = std::chrono::milliseconds(idle_ms)});
    const auto start = steady::now();
    const auto before = sample(redis, "before", start);
    std::printf("%s\n", before.dump().c_str());

    std::atomic<long long> next{0};
    std::atomic<long long> granted{0};
    {
        std::vector<std::jthread> workers;
        for (long long t = 0; t < threads; ++t) {
            workers.emplace_back([&] {
                const dlock::lock_options o{
                    .lease = std::chrono::milliseconds(lease_ms), .wait = 0ms, .renew = false};
                for (long long i = next.fetch_add(1); i < names; i = next.fetch_add(1)) {
                    std::error_code ec;
                    auto lease = redis.acquire("order/" + std::to_string(i), o, ec);
                    if (ec) {
                        failures.fetch_add(1);
                        continue;
                    }
                    granted.fetch_add(1);
                    lease.release(ec);
                    if (ec) failures.fetch_add(1);
                }
            });
        }
    }
    auto after = sample(redis, "after", start);
    after["granted"] = granted.load();
    after["failures"] = failures.load();
    std::printf("%s\n", after.dump().c_str());
    const auto used_at = steady::now();

    nlohmann::json settled;
    for (;;) {
        settled = sample(redis, "settled", start);
        if (settled["dbsize"] == before["dbsize"] ||
            steady::now() - used_at > std::chrono::seconds(settle_s))
            break;
        std::this_thread::sleep_for(1s);
    }
    settled["s_since_last_use"] = std::chrono::duration<double>(steady::now() - used_at).count();
    std::printf("%s\n", settled.dump().c_str());
    std::printf("%s\n", nlohmann::json{{"event", "done"},
                                       {"names", names},
                                       {"idle_expiry_ms", idle_ms},
                                       {"lease_ms", lease_ms}}
                            .dump()
                            .c_str());
    return failures.load() == 0 ? 0 : 1;
}
