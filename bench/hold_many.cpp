// dlock-bench-hold-many: workload W6, many locks held at once by one process, with renewal.
//
// One client (--mode mutex: dlock::redis::client on the first --servers entry; --mode redlock:
// dlock::redlock::client over every entry) acquires --locks independent leases (default 10,000)
// with a short lease
// (--lease-ms, default 3000, so the client's single watchdog thread renews each about every
// second), holds them all for --hold-s seconds while the main thread sleeps, then checks that every
// one is still held (client side: state() == held; server side: PTTL of its key > 0, on at least a
// quorum of the servers for redlock) and releases
// them. It reports the process's RSS (VmRSS from /proc/self/status) before and while holding, and
// the CPU the process used during the hold window (getrusage utime + stime, as a percentage of one
// core): with the main thread asleep that is the cost of renewal.
//
//   dlock-bench-hold-many --servers HOST:PORT[,...] --out FILE --key-prefix P
//                         [--mode mutex|redlock] [--locks N] [--lease-ms L] [--hold-s S]
//
// FILE gets one JSON object per line: {"event":"done", ...} with every figure (last line).
#include "stats.hpp"

#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>

#include <sys/resource.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

using dlock_bench::now_ns;  // CLOCK_MONOTONIC in nanoseconds (§2)

long vm_rss_kb() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.starts_with("VmRSS:")) return std::strtol(line.c_str() + 6, nullptr, 10);
    }
    return -1;
}

std::int64_t cpu_ns() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    const auto tv = [](const timeval& t) {
        return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_usec * 1000;
    };
    return tv(ru.ru_utime) + tv(ru.ru_stime);
}

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "dlock-bench-hold-many: %s\nusage: dlock-bench-hold-many --servers "
                 "HOST:PORT[,...] --out FILE "
                 "--key-prefix P [--mode mutex|redlock] [--locks N] [--lease-ms L] [--hold-s S]\n",
                 why.c_str());
    std::exit(64);
}

std::atomic<long> renewed_events{0};
std::atomic<long> lost_events{0};
std::atomic<long> error_reports{0};

void observe(const dlock::lock_event& e) {
    if (e.kind == dlock::event_kind::renewed)
        renewed_events.fetch_add(1, std::memory_order_relaxed);
    if (e.kind == dlock::event_kind::lost) lost_events.fetch_add(1, std::memory_order_relaxed);
}

void report(std::error_code, std::string_view what) {
    if (error_reports.fetch_add(1) < 5)
        std::fprintf(stderr, "dlock: %.*s\n", static_cast<int>(what.size()), what.data());
}

std::vector<std::string> split(const std::string& list) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at <= list.size()) {
        const auto comma = list.find(',', at);
        out.push_back(list.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> servers;
    std::string mode = "mutex";
    std::string out;
    std::string prefix;
    long locks = 10'000;
    long lease_ms = 3'000;
    double hold_s = 10.0;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (i + 1 >= argc) usage("option " + std::string(a) + " without value");
        const std::string v = argv[++i];
        if (a == "--servers")
            servers = split(v);
        else if (a == "--mode")
            mode = v;
        else if (a == "--out")
            out = v;
        else if (a == "--key-prefix")
            prefix = v;
        else if (a == "--locks")
            locks = std::atol(v.c_str());
        else if (a == "--lease-ms")
            lease_ms = std::atol(v.c_str());
        else if (a == "--hold-s")
            hold_s = std::atof(v.c_str());
        else
            usage("unknown option " + std::string(a));
    }
    if (servers.empty() || servers.front().empty() || out.empty() || prefix.empty() || locks <= 0 ||
        lease_ms <= 0 || hold_s <= 0) {
        usage("--servers, --out and --key-prefix are required; numbers must be > 0");
    }
    if (mode != "mutex" && mode != "redlock") usage("--mode must be mutex or redlock");
    const auto lease = std::chrono::milliseconds(lease_ms);

    if (mode == "mutex") servers.resize(1);
    nlohmann::json result{{"event", "done"}, {"mode", mode},         {"servers", servers.size()},
                          {"locks", locks},  {"lease_ms", lease_ms}, {"hold_s", hold_s}};
    try {
        std::unique_ptr<dlock::backend> backend;
        if (mode == "mutex") {
            backend = std::make_unique<dlock::redis::client>(dlock::redis::client_options{
                .url = "redis://" + servers.front(), .observer = observe, .error_handler = report});
        } else {
            std::vector<std::string> urls;
            for (const auto& s : servers) urls.push_back("redis://" + s);
            backend = std::make_unique<dlock::redlock::client>(dlock::redlock::client_options{
                .urls = urls, .observer = observe, .error_handler = report});
        }
        dlock::backend& client = *backend;
        client.acquire(prefix + ":warmup", {.lease = lease}).release();
        const long rss_before = vm_rss_kb();

        std::vector<std::string> names;
        names.reserve(static_cast<std::size_t>(locks));
        for (long i = 0; i < locks; ++i) names.push_back(prefix + ":" + std::to_string(i));
        std::vector<dlock::lease> held;
        held.reserve(names.size());
        const std::int64_t t_acq0 = now_ns();
        for (const auto& n : names)
            held.push_back(client.acquire(n, {.lease = lease, .wait = 0ms}));
        const std::int64_t t_acq1 = now_ns();
        const long rss_held = vm_rss_kb();

        // The hold window: the main thread sleeps, so the process's CPU is the watchdog's.
        const long renewed0 = renewed_events.load();
        const std::int64_t cpu0 = cpu_ns();
        const std::int64_t t0 = now_ns();
        std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
        const std::int64_t cpu1 = cpu_ns();
        const std::int64_t t1 = now_ns();
        const long renewed1 = renewed_events.load();
        const long rss_end = vm_rss_kb();

        long still_held = 0;
        std::int64_t min_expires_ms = INT64_MAX;
        for (const auto& l : held) {
            if (l.state() == dlock::lock_state::held && l.expires_in() > 0ms) ++still_held;
            min_expires_ms = std::min<std::int64_t>(min_expires_ms, l.expires_in().count());
        }
        // Server side: the lock key still has a TTL on every server (mutex) or on a quorum
        // (redlock).
        std::vector<long> present(names.size(), 0);
        for (const auto& s : servers) {
            dlock::redis::client check({.url = "redis://" + s});
            for (std::size_t i = 0; i < names.size(); ++i) {
                const auto r = check.command({"PTTL", check.lock_key(names[i])});
                if (r.type == dlock::redis::reply::kind::integer && r.integer > 0) ++present[i];
            }
        }
        const long quorum = static_cast<long>(servers.size() / 2 + 1);
        long on_server = 0;
        for (const auto p : present) on_server += p >= quorum;
        const std::int64_t t_rel0 = now_ns();
        long release_failures = 0;
        for (auto& l : held) {
            std::error_code ec;
            l.release(ec);
            if (ec) ++release_failures;
        }
        const std::int64_t t_rel1 = now_ns();

        const double window_s = static_cast<double>(t1 - t0) / 1e9;
        result.update({
            {"acquire_s", static_cast<double>(t_acq1 - t_acq0) / 1e9},
            {"release_s", static_cast<double>(t_rel1 - t_rel0) / 1e9},
            {"window_s", window_s},
            {"cpu_s", static_cast<double>(cpu1 - cpu0) / 1e9},
            {"cpu_pct_of_core",
             100.0 * static_cast<double>(cpu1 - cpu0) / static_cast<double>(t1 - t0)},
            {"rss_before_kb", rss_before},
            {"rss_held_kb", rss_held},
            {"rss_end_kb", rss_end},
            {"rss_per_lock_bytes",
             locks > 0 ? (rss_end - rss_before) * 1024.0 / static_cast<double>(locks) : 0.0},
            {"renewals", renewed1 - renewed0},
            {"renewals_per_s", static_cast<double>(renewed1 - renewed0) / window_s},
            {"still_held", still_held},
            {"on_server", on_server},
            {"min_expires_in_ms", min_expires_ms},
            {"lost", lost_events.load()},
            {"errors", error_reports.load()},
            {"release_failures", release_failures},
        });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dlock-bench-hold-many: %s\n", e.what());
        return 1;
    }
    const std::string tmp = out + ".tmp";
    {
        std::ofstream f(tmp);
        f << result.dump() << '\n';
        if (!f) {
            std::fprintf(stderr, "dlock-bench-hold-many: cannot write %s\n", tmp.c_str());
            return 1;
        }
    }
    if (std::rename(tmp.c_str(), out.c_str()) != 0) return 1;
    std::fflush(nullptr);
    std::_Exit(0);
}
