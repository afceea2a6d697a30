// oversell: several processes sell from one stock count kept in Redis, first without a lock and
// then under a dlock::mutex (the shop itself: oversell_shop.hpp, which `dlock demo` runs too).
// Without the lock, processes overwrite each other's writes and sell more than there was; with
// it, they sell exactly the stock.
//
//   oversell --url redis://127.0.0.1:6379 [--workers 4] [--stock 50] [--mode both|unlocked|locked]
//
// Exit status: 0 when the locked run sold exactly the stock (an unlocked-only run just reports),
// 1 when it did not or a worker failed, 2 on bad arguments or when Redis cannot be used.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "oversell_shop.hpp"

using namespace std::chrono_literals;

namespace {

struct settings {
    std::string url;
    int workers = 4;
    long long stock = 50;
    std::string mode = "both";  // parent: both|unlocked|locked; worker: unlocked|locked
    bool worker = false;        // set when the parent re-executes itself as a worker process
    std::string run_id;         // names this run's keys; chosen by the parent
};

struct run_keys {
    std::string stock, sold, lock;
};

run_keys keys_for(const std::string& run_id, const std::string& mode) {
    return {"oversell:stock:" + run_id, "oversell:sold:" + run_id + ":" + mode,
            "oversell:" + run_id};
}

settings parse(int argc, char** argv) {
    settings s;
    const auto number = [](std::string_view flag, const char* text, long long lo, long long hi) {
        char* end = nullptr;
        const long long value = std::strtoll(text, &end, 10);
        if (*text == '\0' || *end != '\0' || value < lo || value > hi) {
            throw std::invalid_argument(std::string(flag) + " must be a number in [" +
                                        std::to_string(lo) + ", " + std::to_string(hi) +
                                        "], got \"" + text + "\"");
        }
        return value;
    };
    for (int i = 1; i < argc; ++i) {
        const std::string_view flag = argv[i];
        if (flag == "--worker") {
            s.worker = true;
            continue;
        }
        if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
        const char* value = argv[++i];
        if (flag == "--url") {
            s.url = value;
        } else if (flag == "--workers") {
            s.workers = static_cast<int>(number(flag, value, 1, 64));
        } else if (flag == "--stock") {
            s.stock = number(flag, value, 0, 1'000'000);
        } else if (flag == "--mode") {
            s.mode = value;
        } else if (flag == "--run") {
            s.run_id = value;
        } else {
            throw std::invalid_argument("unknown option " + std::string(flag));
        }
    }
    if (s.url.empty()) throw std::invalid_argument("--url is required");
    if (s.mode != "both" && s.mode != "unlocked" && s.mode != "locked") {
        throw std::invalid_argument("--mode must be both, unlocked or locked");
    }
    if (s.worker && (s.mode == "both" || s.run_id.empty())) {
        throw std::invalid_argument("--worker needs --run and --mode unlocked|locked");
    }
    return s;
}

int run_worker(const settings& s) {
    dlock::redis::client redis({.url = s.url});
    const auto keys = keys_for(s.run_id, s.mode);
    if (s.mode == "unlocked") {
        // No lock: every worker checks and writes whenever it gets there.
        oversell::sell_until_sold_out(redis, keys.stock, keys.sold, nullptr);
        return 0;
    }
    dlock::mutex m(redis, keys.lock, {.lease = 10s});
    oversell::sell_until_sold_out(redis, keys.stock, keys.sold, &m);
    return 0;
}

// Shell-quotes one argument for std::system: '...' with each ' written as '\''.
std::string shell_quoted(std::string_view arg) {
    std::string out = "'";
    for (const char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

struct outcome {
    std::string mode;
    long long sold = 0, oversold = 0, final_stock = 0;
    std::chrono::milliseconds wall{};
    int failed_workers = 0;
};

outcome run_mode(dlock::redis::client& redis, const settings& s, const std::string& mode) {
    const auto keys = keys_for(s.run_id, mode);
    oversell::checked(redis, {"SET", keys.stock, std::to_string(s.stock)});
    oversell::checked(redis, {"DEL", keys.sold});

    // Workers are separate processes, like the shop's servers: each one re-executes this binary.
    // std::system keeps the example to the standard library; one thread waits on each process.
    // glibc documents system() as MT-Safe, so concurrent calls are fine on the Linux we target.
    const auto self = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::string command = shell_quoted(self) + " --worker --url " + shell_quoted(s.url) +
                                " --mode " + mode + " --run " + shell_quoted(s.run_id);
    std::vector<int> status(static_cast<std::size_t>(s.workers), 0);
    const auto started = std::chrono::steady_clock::now();
    {
        std::vector<std::jthread> waiters;
        waiters.reserve(status.size());
        for (auto& st : status) {
            waiters.emplace_back([&st, &command] {
                st = std::system(command.c_str());  // NOLINT(concurrency-mt-unsafe): see above
            });
        }
    }  // the jthreads join here: every worker has exited
    outcome o{.mode = mode};
    o.wall = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    for (const int st : status) o.failed_workers += st != 0;
    o.sold = oversell::read_count(redis, keys.sold);
    o.oversold = std::max(0LL, o.sold - s.stock);
    o.final_stock = oversell::read_count(redis, keys.stock);
    // Leave nothing behind on a shared server: the counters and this lock's fence counter.
    oversell::checked(redis, {"DEL", keys.stock, keys.sold, redis.fence_key(keys.lock)});
    return o;
}

int run_parent(settings s) {
    // Random, so that runs sharing a server (or a rerun after a crash) never share keys.
    s.run_id = std::to_string(std::random_device{}());
    dlock::redis::client redis({.url = s.url});
    redis.ping();  // fail here, once, with a clear message rather than in every worker

    std::vector<outcome> results;
    if (s.mode != "locked") results.push_back(run_mode(redis, s, "unlocked"));
    if (s.mode != "unlocked") results.push_back(run_mode(redis, s, "locked"));

    std::printf("%d workers, stock %lld\n", s.workers, s.stock);
    std::printf("%-9s %6s %9s %12s %10s\n", "mode", "sold", "oversold", "final stock", "wall time");
    int status = 0;
    for (const auto& o : results) {
        std::printf("%-9s %6lld %9lld %12lld %8lldms\n", o.mode.c_str(), o.sold, o.oversold,
                    o.final_stock, static_cast<long long>(o.wall.count()));
        if (o.failed_workers > 0) {
            std::fprintf(stderr, "oversell: %d %s worker(s) failed\n", o.failed_workers,
                         o.mode.c_str());
            status = 1;
        }
        if (o.mode == "locked" && o.sold != s.stock) {  // more is overselling, less is a lost sale
            std::fprintf(stderr, "oversell: the locked run sold %lld of a stock of %lld\n", o.sold,
                         s.stock);
            status = 1;
        }
    }
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    try {
        s = parse(argc, argv);
    } catch (const std::invalid_argument& e) {
        std::fprintf(
            stderr,
            "oversell: %s\nusage: oversell --url redis://HOST:PORT [--workers N] [--stock N] "
            "[--mode both|unlocked|locked]\n",
            e.what());
        return 2;
    }
    try {
        return s.worker ? run_worker(s) : run_parent(s);
    } catch (const dlock::error& e) {
        std::fprintf(stderr, "oversell%s: %s\n", s.worker ? " worker" : "", e.what());
        return 2;
    } catch (const std::exception& e) {  // e.g. a stock key that does not hold a number
        std::fprintf(stderr, "oversell%s: %s\n", s.worker ? " worker" : "", e.what());
        return 1;
    }
}
