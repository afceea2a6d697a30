// dlock-bench-striped: the stock scenario of docs/granularity.md, measured. W workers (threads,
// each with its own dlock::redis::client, as separate processes would have) decrement the stock of
// random items out of I; each decrement is a read-modify-write (GET, then SET) that a lock must
// protect. Every configuration runs for the same time, one after another, in one run, so their
// ratios compare like with like:
//   global        one lock for the whole stock (striped with 1 stripe)
//   stripes=N     dlock::striped<dlock::mutex> with N stripes
//   per-item      one dlock lock per item (the lock named after the item)
//   lua           no lock: a server-side script decrements atomically (one round trip)
// After each configuration the stock is checked: every decrement must be accounted for exactly
// (a lost update means the locking was wrong, and the run fails).
//
// Usage: dlock-bench-striped --url redis://127.0.0.1:6399 [--items 1000] [--workers 8]
//            [--seconds 3] [--rounds 3] [--stripes 1,2,4,8,16,64,256]
// Output: one line per configuration and round, then a Markdown table of each configuration's
// median round (ops/s and the ratio to the first configuration, `global`).
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/striped.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

struct config {
    std::string url;
    int items = 1000;
    int workers = 8;
    double seconds = 3;
    int rounds = 3;
    std::vector<int> stripes{1, 2, 4, 8, 16, 64, 256};
};

struct result {
    std::string name;
    double ops_per_s = 0;
};

constexpr long long initial_stock = 1'000'000'000;
constexpr const char* decrement_script =
    "local v = tonumber(redis.call('GET', KEYS[1])) "
    "if v > 0 then redis.call('SET', KEYS[1], v - 1) return 1 end return 0";

std::string item_key(const std::string& run, int i) { return run + ":qty:" + std::to_string(i); }

/// The read-modify-write a lock protects: two round trips.
void decrement_unlocked(dlock::redis::client& redis, const std::string& key) {
    const auto v = std::stoll(redis.command({"GET", key}).text);
    redis.command({"SET", key, std::to_string(v - 1)});
}

result run_one(const config& c, const std::string& run, const std::string& mode, int stripes) {
    // Reset the stock.
    dlock::redis::client admin({.url = c.url});
    for (int i = 0; i < c.items; ++i)
        admin.command({"SET", item_key(run, i), std::to_string(initial_stock)});
    const std::string base = run + ":" + mode + (stripes > 0 ? std::to_string(stripes) : "");

    std::atomic<bool> go{false}, stop{false};
    std::vector<long long> done(static_cast<std::size_t>(c.workers), 0);
    std::vector<std::thread> threads;
    for (int w = 0; w < c.workers; ++w) {
        threads.emplace_back([&, w] {
            dlock::redis::client redis({.url = c.url});
            std::unique_ptr<dlock::striped<dlock::mutex>> striped;
            if (stripes > 0) {
                striped = std::make_unique<dlock::striped<dlock::mutex>>(
                    redis, base, stripes, dlock::lock_options{.lease = 10s});
            }
            std::mt19937_64 rng(static_cast<std::uint64_t>(w) * 7919 + 1);
            std::uniform_int_distribution<int> pick(0, c.items - 1);
            while (!go.load()) std::this_thread::yield();
            long long n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
                const auto key = item_key(run, pick(rng));
                if (mode == "lua") {
                    redis.command({"EVAL", decrement_script, "1", key});
                } else if (mode == "per-item") {
                    auto held = redis.acquire(base + "/" + key, {.lease = 10s});
                    decrement_unlocked(redis, key);
                    held.release();
                } else {
                    auto& m = striped->get(key);
                    m.lock();
                    decrement_unlocked(redis, key);
                    m.unlock();
                }
                ++n;
            }
            done[static_cast<std::size_t>(w)] = n;
        });
    }
    const auto start = steady::now();
    go = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(c.seconds));
    stop = true;
    for (auto& t : threads) t.join();
    const double elapsed = std::chrono::duration<double>(steady::now() - start).count();
    long long total = 0;
    for (const auto n : done) total += n;

    // Every decrement accounted for: no lost update.
    long long left = 0;
    for (int i = 0; i < c.items; ++i)
        left += initial_stock - std::stoll(admin.command({"GET", item_key(run, i)}).text);
    if (left != total) {
        std::fprintf(stderr, "%s: %lld decrements made, %lld recorded: lost updates\n",
                     mode.c_str(), total, left);
        std::exit(1);
    }
    for (int i = 0; i < c.items; ++i) admin.command({"DEL", item_key(run, i)});
    const auto name = stripes > 0 ? (stripes == 1 ? std::string("global (1 stripe)")
                                                  : "stripes=" + std::to_string(stripes))
                                  : mode;
    return {name, static_cast<double>(total) / elapsed};
}

std::vector<int> parse_list(const std::string& s) {
    std::vector<int> out;
    std::size_t at = 0;
    while (at < s.size()) {
        const auto comma = s.find(',', at);
        out.push_back(std::stoi(s.substr(at, comma - at)));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    config c;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            const auto next = [&]() -> std::string {
                if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
                return argv[++i];
            };
            if (a == "--url")
                c.url = next();
            else if (a == "--items")
                c.items = std::stoi(next());
            else if (a == "--workers")
                c.workers = std::stoi(next());
            else if (a == "--seconds")
                c.seconds = std::stod(next());
            else if (a == "--rounds")
                c.rounds = std::stoi(next());
            else if (a == "--stripes")
                c.stripes = parse_list(next());
            else
                throw std::invalid_argument("unknown argument " + a);
        }
        if (c.url.empty()) throw std::invalid_argument("--url is required");
        if (c.items < 1 || c.workers < 1 || c.rounds < 1 || !(c.seconds > 0))
            throw std::invalid_argument(
                "--items, --workers, --rounds and --seconds must be positive");
        for (const auto n : c.stripes) {
            if (n < 1 || static_cast<std::size_t>(n) > dlock::max_stripes)
                throw std::invalid_argument("--stripes values must be in [1, 65536]");
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr,
                     "dlock-bench-striped: %s\nusage: dlock-bench-striped --url URL [--items N] "
                     "[--workers N] [--seconds S] [--rounds R] [--stripes 1,2,4,...]\n",
                     e.what());
        return 2;
    }
    try {
        const auto run = "bench-striped:" + std::to_string(::getpid()) + ":" +
                         std::to_string(steady::now().time_since_epoch().count());
        // Rounds interleave the configurations, so a change in machine load over the run hits
        // them all alike; each configuration reports its median round.
        struct series {
            std::string mode;
            int stripes;
            std::vector<result> rounds;
        };
        std::vector<series> all;
        for (const auto n : c.stripes) all.push_back({"striped", n, {}});
        all.push_back({"per-item", 0, {}});
        all.push_back({"lua", 0, {}});
        for (int r = 0; r < c.rounds; ++r) {
            for (auto& one : all) {
                one.rounds.push_back(run_one(c, run, one.mode, one.stripes));
                std::printf("round %d  %-20s %10.0f ops/s\n", r + 1, one.rounds.back().name.c_str(),
                            one.rounds.back().ops_per_s);
                std::fflush(stdout);
            }
        }
        std::vector<result> results;
        for (auto& one : all) {
            std::sort(one.rounds.begin(), one.rounds.end(),
                      [](const result& a, const result& b) { return a.ops_per_s < b.ops_per_s; });
            results.push_back(one.rounds[one.rounds.size() / 2]);
        }
        const double global = results.front().ops_per_s;
        std::printf(
            "\n%d items, %d workers, %d rounds of %.1f s, median round\n\n"
            "| locking | ops/s | vs first |\n|---|---:|---:|\n",
            c.items, c.workers, c.rounds, c.seconds);
        for (const auto& r : results)
            std::printf("| %s | %.0f | %.2fx |\n", r.name.c_str(), r.ops_per_s,
                        r.ops_per_s / global);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dlock-bench-striped: %s\n", e.what());
        return 1;
    }
}
