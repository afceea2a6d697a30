// dlock-torture-client: one worker of the torture harness (docs/torture.md). It uses the public
// API only. It loops on one lock name: acquire (one lock kind, one backend), fenced write, hold for
// a random time while re-checking the lease, fenced write, release, idle. Every step is one JSON
// line appended to --out with write(2) (no buffering, so a SIGKILL loses nothing already logged),
// stamped with CLOCK_MONOTONIC in nanoseconds: that clock is system-wide on Linux, so the checker
// compares the logs of every process on one time line.
//
// What a line claims: at time `t` the holder saw its grant valid for `end - t` more (its
// expires_in()), so it claimed the lock until `end`. A claim is what the library promised; the
// checker proves that no two claims on a name overlap when the kinds exclude each other.
//
// The fenced resource is a key on a separate Redis server that the harness never faults. A write
// carries the grant's token; the server's script refuses a token below the highest one written
// and appends every attempt (accepted or refused) to a log list for the checker.
//
// SIGTERM: finish the current hold, release, log "exit", leave.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#if DLOCK_HAS_ETCD
#include <dlock/etcd/client.hpp>
#endif

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> stop_requested{false};

void on_term(int) { stop_requested.store(true); }

std::int64_t now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string json_escape(std::string_view s) {
    std::string out;
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            out += ' ';
        } else {
            out += c;
        }
    }
    return out;
}

class log_file {
public:
    explicit log_file(const std::string& path)
        : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
        if (fd_ < 0) {
            std::perror(path.c_str());
            std::exit(2);
        }
    }
    ~log_file() { ::close(fd_); }
    log_file(const log_file&) = delete;
    log_file& operator=(const log_file&) = delete;

    /// One record: `fields` is the inside of a JSON object without braces.
    void line(const std::string& fields) {
        const std::string text = "{" + fields + "}\n";
        std::size_t done = 0;
        while (done < text.size()) {
            const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
            if (n <= 0) return;
            done += static_cast<std::size_t>(n);
        }
    }

private:
    int fd_;
};

struct args {
    std::map<std::string, std::string> values;

    std::string get(const std::string& key, const std::string& fallback = {}) const {
        const auto it = values.find(key);
        return it == values.end() ? fallback : it->second;
    }
    long long num(const std::string& key, long long fallback) const {
        const auto it = values.find(key);
        return it == values.end() ? fallback : std::stoll(it->second);
    }
};

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (const char c : s) {
        if (c == sep) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

/// The lock kinds behind one interface: acquire with a bound, observe, release.
struct lock_adapter {
    std::function<bool(std::chrono::milliseconds)> acquire;
    std::function<void()> release;
    std::function<std::uint64_t()> token;
    std::function<std::chrono::milliseconds()> expires_in;
    std::function<dlock::lock_state()> state;
};

template <class Mutex>
lock_adapter exclusive_adapter(Mutex& m) {
    return {[&m](std::chrono::milliseconds wait) { return m.try_lock_for(wait); },
            [&m] { m.unlock(); }, [&m] { return m.fencing_token(); },
            [&m] { return m.expires_in(); }, [&m] { return m.state(); }};
}

constexpr const char* fence_script =
    "local seen = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local t = tonumber(ARGV[1]) "
    "local ok = 0 "
    "if t >= seen then ok = 1 "
    "  if ARGV[2] == 'w' and t > seen then redis.call('SET', KEYS[1], ARGV[1]) end "
    "end "
    "redis.call('RPUSH', KEYS[2], ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ok .. ' ' .. seen .. ' ' .. "
    "ARGV[3]) "
    "return {ok, seen}";

}  // namespace

int main(int argc, char** argv) {
    args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string key = argv[i];
        if (key.rfind("--", 0) != 0) {
            std::fprintf(stderr, "dlock-torture-client: bad argument '%s'\n", argv[i]);
            return 2;
        }
        a.values[key.substr(2)] = argv[i + 1];
    }
    if (a.get("backends") == "list") {  // the harness asks which backends this build has
        std::printf("redis redlock%s%s\n", DLOCK_HAS_ZOOKEEPER ? " zk" : "",
                    DLOCK_HAS_ETCD ? " etcd" : "");
        return 0;
    }
    const std::string backend_name = a.get("backend", "redis");
    const std::string kind = a.get("kind", "mutex");
    const std::string name = a.get("name", "t");
    const std::string id = a.get("id", "c");
    const auto permits = static_cast<std::uint32_t>(a.num("permits", 1));
    const auto lease_ms = a.num("lease-ms", 1000);
    const bool renew = a.num("renew", 1) != 0;
    const auto hold_min = a.num("hold-min-ms", 10);
    const auto hold_max = a.num("hold-max-ms", 200);
    const auto idle_max = a.num("idle-max-ms", 50);
    const auto wait_max = a.num("wait-max-ms", 4000);
    const auto cmd_timeout = std::chrono::milliseconds(a.num("command-timeout-ms", 300));
    // Redis and Redlock: how long a name's fence counter outlives its last grant.
    const auto idle_expiry = std::chrono::milliseconds(a.num("idle-expiry-ms", 24 * 3600 * 1000));
    std::mt19937_64 rng(static_cast<std::uint64_t>(a.num("seed", 1)));
    log_file out(a.get("out", "/dev/stdout"));

    struct sigaction sa {};
    sa.sa_handler = on_term;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);

    auto quiet = [](std::error_code, std::string_view) {};
    std::unique_ptr<dlock::backend> backend;
    if (backend_name == "redis") {
        backend = std::make_unique<dlock::redis::client>(
            dlock::redis::client_options{.url = a.get("url"),
                                         .command_timeout = cmd_timeout,
                                         .error_handler = quiet,
                                         .idle_expiry = idle_expiry});
    } else if (backend_name == "redlock") {
        backend = std::make_unique<dlock::redlock::client>(
            dlock::redlock::client_options{.urls = split(a.get("url"), ','),
                                           .command_timeout = cmd_timeout,
                                           .error_handler = quiet,
                                           .idle_expiry = idle_expiry});
#if DLOCK_HAS_ZOOKEEPER
    } else if (backend_name == "zk") {
        backend = std::make_unique<dlock::zk::client>(dlock::zk::client_options{
            .url = a.get("url"),
            .session_timeout = std::chrono::milliseconds(a.num("session-ms", 1000)),
            .error_handler = quiet});
#endif
#if DLOCK_HAS_ETCD
    } else if (backend_name == "etcd") {
        // Every lock of the process lives by the client's one etcd lease (its session).
        backend = std::make_unique<dlock::etcd::client>(dlock::etcd::client_options{
            .url = a.get("url"),
            .session_ttl = std::chrono::milliseconds(a.num("session-ms", 2000)),
            .connect_timeout = std::chrono::milliseconds(a.num("connect-timeout-ms", 1000)),
            .command_timeout = cmd_timeout,
            .error_handler = quiet});
#endif
    } else {
        std::fprintf(stderr, "dlock-torture-client: unknown backend '%s'\n", backend_name.c_str());
        return 2;
    }
    dlock::redis::client fence(dlock::redis::client_options{
        .url = a.get("fence"), .command_timeout = std::chrono::seconds(2), .error_handler = quiet});
    const std::string fence_key = "fence:" + name;
    const std::string fence_log = "fencelog:" + name;

    dlock::lock_options options{};
    options.lease = std::chrono::milliseconds(lease_ms);
    options.renew = renew;
    // SIGTERM also ends a wait in progress (errc::canceled), so the drain is quick.
    std::stop_source cancel;
    options.cancel = cancel.get_token();
    std::thread([&cancel] {
        while (!stop_requested.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        cancel.request_stop();
    }).detach();

    // One lock object per process, of one kind, on one name.
    std::optional<dlock::mutex> plain;
    std::optional<dlock::fair_mutex> fair;
    std::optional<dlock::recursive_mutex> recursive;
    std::optional<dlock::shared_mutex> shared;
    std::optional<dlock::counting_semaphore> semaphore;
    lock_adapter lock;
    char fence_mode = 'w';  // 'w' write (exclusive kinds), 'r' check only (readers), 'n' none
    if (kind == "mutex") {
        lock = exclusive_adapter(plain.emplace(*backend, name, options));
    } else if (kind == "fair") {
        lock = exclusive_adapter(fair.emplace(*backend, name, options));
    } else if (kind == "recursive") {
        lock = exclusive_adapter(recursive.emplace(*backend, name, options));
    } else if (kind == "write") {
        lock = exclusive_adapter(shared.emplace(*backend, name, options));
    } else if (kind == "read") {
        auto& m = shared.emplace(*backend, name, options);
        lock = {[&m](std::chrono::milliseconds wait) { return m.try_lock_shared_for(wait); },
                [&m] { m.unlock_shared(); }, [&m] { return m.fencing_token(); },
                [&m] { return m.expires_in(); }, [&m] { return m.state(); }};
        fence_mode = 'r';
    } else if (kind == "semaphore") {
        auto& s = semaphore.emplace(*backend, name, permits, options);
        lock = {
            [&s](std::chrono::milliseconds wait) { return s.try_acquire_for(wait, 1); },
            [&s] {
                std::error_code ec;  // a failed release expires on the server; claims are checked
                s.release(1, ec);
            },
            [&s] { return s.fencing_token(); }, [&s] { return s.expires_in(); },
            [&s] { return s.state(); }};
        if (permits > 1) fence_mode = 'n';
    } else {
        std::fprintf(stderr, "dlock-torture-client: unknown kind '%s'\n", kind.c_str());
        return 2;
    }

    const std::string who = "\"id\":\"" + json_escape(id) + "\"";
    out.line("\"ev\":\"start\"," + who + ",\"pid\":" + std::to_string(::getpid()) + ",\"kind\":\"" +
             kind + "\",\"backend\":\"" + backend_name + "\",\"name\":\"" + json_escape(name) +
             "\",\"permits\":" + std::to_string(permits) + ",\"t\":" + std::to_string(now_ns()));

    auto uniform = [&rng](long long lo, long long hi) {
        return std::uniform_int_distribution<long long>(lo, std::max(lo, hi))(rng);
    };
    // The holder's claim right now: `end` (ns) is when its grant stops being guaranteed; 0 when it
    // no longer claims anything (state lost or no time left).
    auto claim = [&lock](std::int64_t& t) -> std::int64_t {
        t = now_ns();
        const auto st = lock.state();
        const auto left = lock.expires_in();
        if (st == dlock::lock_state::lost || left.count() <= 0) return 0;
        return t + std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    };

    std::uint64_t seq = 0;
    while (!stop_requested.load()) {
        const std::int64_t t_req = now_ns();
        bool granted = false;
        try {
            granted = lock.acquire(std::chrono::milliseconds(uniform(wait_max / 4, wait_max)));
        } catch (const std::exception& e) {
            out.line("\"ev\":\"error\"," + who + ",\"t\":" + std::to_string(now_ns()) +
                     ",\"what\":\"" + json_escape(e.what()) + "\"");
            std::this_thread::sleep_for(std::chrono::milliseconds(uniform(20, 100)));
            continue;
        }
        if (!granted) continue;
        const std::uint64_t g = ++seq;
        const std::string grant = who + ",\"g\":" + std::to_string(g);
        std::uint64_t token = 0;
        try {
            token = lock.token();
        } catch (const std::exception&) {
            token = 0;  // lost between the grant and this call: logged as an empty claim
        }
        std::int64_t t = 0;
        std::int64_t end = claim(t);
        out.line("\"ev\":\"grant\"," + grant + ",\"tok\":" + std::to_string(token) +
                 ",\"t_req\":" + std::to_string(t_req) + ",\"t\":" + std::to_string(t) +
                 ",\"end\":" + std::to_string(end));

        bool lost = end == 0;
        auto fenced = [&] {
            if (fence_mode == 'n' || lost) return;
            std::int64_t tc = 0;
            const std::int64_t e = claim(tc);
            if (e == 0) return;
            std::error_code ec;
            const auto r = fence.command(
                {"EVAL", fence_script, "2", fence_key, fence_log, std::to_string(token),
                 std::string(1, fence_mode), id + "/" + std::to_string(g)},
                ec);
            const std::int64_t t_reply = now_ns();
            if (ec || r.type != dlock::redis::reply::kind::array || r.elements.size() != 2) return;
            out.line("\"ev\":\"fence\"," + grant + ",\"tok\":" + std::to_string(token) +
                     ",\"mode\":\"" + std::string(1, fence_mode) +
                     "\",\"t\":" + std::to_string(tc) + ",\"end\":" + std::to_string(e) +
                     ",\"t_reply\":" + std::to_string(t_reply) +
                     ",\"ok\":" + std::to_string(r.elements[0].integer) +
                     ",\"seen\":" + std::to_string(r.elements[1].integer));
        };

        fenced();
        const std::int64_t hold_until = now_ns() + uniform(hold_min, hold_max) * 1'000'000;
        while (!lost && now_ns() < hold_until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(uniform(5, 40)));
            end = claim(t);
            if (end == 0) {
                lost = true;
                out.line("\"ev\":\"lost\"," + grant + ",\"t\":" + std::to_string(t));
            } else {
                out.line("\"ev\":\"check\"," + grant + ",\"t\":" + std::to_string(t) +
                         ",\"end\":" + std::to_string(end));
            }
        }
        fenced();
        // From here on the holder claims nothing: the release starts.
        const std::int64_t r0 = now_ns();
        out.line("\"ev\":\"release\"," + grant + ",\"t\":" + std::to_string(r0));
        lock.release();
        out.line("\"ev\":\"released\"," + grant + ",\"t\":" + std::to_string(now_ns()));
        std::this_thread::sleep_for(std::chrono::milliseconds(uniform(0, idle_max)));
    }
    out.line("\"ev\":\"exit\"," + who + ",\"t\":" + std::to_string(now_ns()));
    std::fflush(nullptr);
    // Destructors would release nothing (nothing is held) but may wait on a faulted server.
    std::_Exit(0);
}
