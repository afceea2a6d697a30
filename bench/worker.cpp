// dlock-bench-worker: measures one dlock lock type by speaking the benchmark worker protocol,
// version 1 (docs/benchmarks.md, "The worker").
// A runner starts N copies with the same command line except --worker-id, --key and --out; each
// connects, warms up, waits for --start-at-ns (CLOCK_MONOTONIC), runs blocking acquire / busy-wait
// critical section / release cycles on --key until the deadline, keeps its records in memory and
// writes one JSON Lines file (FILE.tmp, then rename) whose last record is `done`.
//
// Modes (--mode; one per lock type or backend, listed by --help):
//   mutex (default)  dlock::mutex over dlock::redis::client (single Redis instance).
//                    client_options: url = redis://<first --servers entry>, everything else at
//                    its default (connect_timeout 1 s, command_timeout 1 s, key_prefix "dlock").
//                    lock_options: lease = --ttl-ms (the runner passes 10000), everything else
//                    at its default (renew = true every lease/3, wait/max_hold forever, no
//                    max_attempts). acquire = mutex::lock() (blocks, pub/sub-driven waiting; it
//                    never gives up, so lib_retries is always 0); release = mutex::unlock()
//                    (compare-and-delete + PUBLISH). A failed unlock() is reported through
//                    client_options::error_handler and counted in `errors`.
//   sentinel         dlock::mutex over dlock::redis::client with url
//                    redis-sentinel://<every --servers entry>/mymaster: the entries are the
//                    sentinels of a master named mymaster (docs/sentinel.md); options as for mutex.
//   redlock          dlock::mutex over dlock::redlock::client: one lock over every --servers entry
//                    as an independent master (quorum N/2+1). client_options: urls = redis://<each
//                    entry>, everything else at its default (node_timeout lease/200 clamped to
//                    [5, 50] ms). lock_options, acquire and release as for `mutex`.
//   fair             dlock::fair_mutex over dlock::redis::client: FIFO queue with direct hand-off
//                    (the release script makes the next live waiter the owner and notifies only
//                    it). client_options, lock_options, acquire and release as for `mutex`.
//   reentrant        dlock::recursive_mutex over dlock::redis::client, one level per cycle.
//   shared           the read side of dlock::shared_mutex over dlock::redis::client
//                    (lock_shared / unlock_shared). Readers may overlap: the runner's analyser
//                    counts overlaps for this mode instead of reporting exclusion violations.
//                    Options as for `mutex` in both.
//   semaphore        dlock::counting_semaphore with one permit over dlock::redis::client
//                    (acquire() / release(1)); options as for `mutex`.
//   zk               dlock::mutex over dlock::zk::client (Curator-style lock recipe).
//   client_options:
//                    url = zk://<every --servers entry, the ensemble>/dlock-bench, everything
//                    else at its default (session_timeout 10 s, connect_timeout 2 s). lock_options
//                    as for `mutex`: --ttl-ms is validated, but a ZooKeeper grant lives with the
//                    session, not a lease (docs/zookeeper.md). acquire = lock() (a watch on the
//                    node ahead, no polling); release = unlock() (delete of our node).
//   etcd             dlock::mutex over dlock::etcd::client (etcd's own lock recipe).
//   client_options:
//                    url = etcd://<every --servers entry, the cluster>/dlock-bench, everything
//                    else at its default (session_ttl 10 s). lock_options as for `mutex`: a grant
//                    lives with the client's etcd lease (docs/etcd.md). acquire = lock() (a watch
//                    on the key created just before ours); release = unlock() (a fenced delete).
//
// Every mode reaches its backend with dlock::connect(url) (redis://, redlock://a,b,..., zk://,
// redis-sentinel://, etcd://), which builds the client named above with its default options and
// the error handler. With --tls-ca FILE the single-server Redis modes use
// rediss://<server>?tls_ca=FILE instead.
//
// Only one thread of our own (main); the client starts its one background thread. The process
// ends with std::_Exit(0) once the file is renamed into place, so no destructor can delay it.
#include "stats.hpp"

#include <dlock/connect.hpp>
#include <dlock/dlock.hpp>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr int exit_bad_args = 64;              // sysexits EX_USAGE, as the worker protocol says
constexpr int exit_failed = 1;                 // no file written: warm-up or writing failed
constexpr long max_errors = 1000;              // §3 rule 2
constexpr std::size_t max_error_events = 100;  // error events kept for the file (all are counted)

using dlock_bench::now_ns;  // CLOCK_MONOTONIC in nanoseconds (§2)

struct config {
    std::string mode = "mutex";
    std::string key;
    double duration_s = -1;  // < 0: not given
    long long ops = -1;      // < 0: not given
    long long worker_id = 0;
    std::string out;
    std::vector<std::string> servers{"127.0.0.1:6379"};
    long long cs_us = 0;
    long long ttl_ms = 10000;
    long long start_at_ns = 0;
    std::string tls_ca;  // --tls-ca: the Redis modes connect with rediss:// (docs/tls.md)
};

// --- lock types ----------------------------------------------------------------------------

/// One lock type under test. acquire() blocks until held and throws on failure (nothing held);
/// release() throws if the release failed. Implementations are used from the main thread only.
class lock_driver {
public:
    virtual ~lock_driver() = default;
    /// Opens every connection the loop will use and runs at least one full acquire + release on
    /// `private_key` (§3), so lazy set-up is not measured. Throws on failure.
    virtual void warm_up(const std::string& private_key) = 0;
    virtual void acquire() = 0;
    virtual void release() = 0;
    /// Library give-ups counted so far (§3 rule 1).
    virtual long lib_retries() const { return 0; }
};

/// Collects failures the library reports through client_options::error_handler. Releases report
/// there on the calling (main) thread; anything from another thread (the client's background
/// thread: renewal errors) is counted separately.
class error_sink {
public:
    void report(std::error_code ec, std::string_view what) {
        const std::string text = std::string(what) + " [" + ec.message() + "]";
        std::lock_guard lock(mutex_);
        if (std::this_thread::get_id() == main_thread_) {
            ++main_count_;
            last_main_ = text;
        } else {
            ++background_count_;
            last_background_ = text;
        }
    }
    long main_count() {
        std::lock_guard lock(mutex_);
        return main_count_;
    }
    std::string last_main() {
        std::lock_guard lock(mutex_);
        return last_main_;
    }
    long background_count() {
        std::lock_guard lock(mutex_);
        return background_count_;
    }

private:
    const std::thread::id main_thread_ = std::this_thread::get_id();
    std::mutex mutex_;  // guards the members below
    long main_count_ = 0;
    long background_count_ = 0;
    std::string last_main_;
    std::string last_background_;
};

error_sink& errors_reported() {
    static error_sink sink;
    return sink;
}

std::string redis_url(const config& c) {
    if (c.tls_ca.empty()) return "redis://" + c.servers.front();
    return "rediss://" + c.servers.front() + "?tls_ca=" + c.tls_ca;
}

// "a:1,b:2,...": every --servers entry.
std::string server_list(const config& c) {
    std::string out;
    for (const auto& s : c.servers) out += (out.empty() ? "" : ",") + s;
    return out;
}

void report_error(std::error_code ec, std::string_view what) { errors_reported().report(ec, what); }

/// The read side of a dlock::shared_mutex as a mutex-shaped lock: what the `shared` mode measures.
class read_lock {
public:
    read_lock(dlock::backend& backend, std::string name, dlock::lock_options options)
        : mutex_(backend, std::move(name), std::move(options)) {}
    void lock() { mutex_.lock_shared(); }
    bool try_lock() { return mutex_.try_lock_shared(); }
    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return mutex_.try_lock_shared_for(timeout);
    }
    void unlock() noexcept { mutex_.unlock_shared(); }

private:
    dlock::shared_mutex mutex_;
};

/// A one-permit dlock::counting_semaphore as a mutex-shaped lock: what the `semaphore` mode
/// measures (one permit, so the analyser's exclusion check applies unchanged).
class one_permit {
public:
    one_permit(dlock::backend& backend, std::string name, dlock::lock_options options)
        : semaphore_(backend, std::move(name), 1, std::move(options)) {}
    void lock() { semaphore_.acquire(); }
    bool try_lock() { return semaphore_.try_acquire(); }
    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
        return semaphore_.try_acquire_for(timeout);
    }
    void unlock() noexcept {
        std::error_code ec;
        semaphore_.release(1, ec);  // server-side failures reach the client's error handler
    }

private:
    dlock::counting_semaphore semaphore_;
};

/// A mutex-shaped lock type (`Lock`: dlock::mutex, fair_mutex, recursive_mutex, read_lock) over
/// any dlock::backend (settings in the header comment), reached with dlock::connect(url) and the
/// default client options but the error handler. `Blocker` is what the warm-up holds so that a
/// `Lock` has to wait (the exclusive side, for read locks).
template <class Lock = dlock::mutex, class Blocker = Lock>
class mutex_driver final : public lock_driver {
public:
    mutex_driver(const config& c, const std::string& url)
        : lease_(std::chrono::milliseconds(c.ttl_ms)),
          backend_(dlock::connect(url, {.error_handler = report_error})),
          client_(*backend_),
          mutex_(client_, c.key, {.lease = lease_}) {}

    void warm_up(const std::string& private_key) override {
        // The loop's waits go through the client's subscriber connection, which opens on the first
        // wait: hold the private lock, let a second mutex wait on it briefly (SUBSCRIBE, then a
        // time-out), release, then run plain cycles on it.
        {
            Blocker held(client_, private_key, {.lease = lease_});
            if (!held.try_lock()) throw std::runtime_error("warm-up: private lock is held");
            Lock waiter(client_, private_key, {.lease = lease_});
            if (waiter.try_lock_for(20ms))
                throw std::runtime_error("warm-up: private lock taken twice");
            held.unlock();
        }
        Lock m(client_, private_key, {.lease = lease_});
        for (int i = 0; i < 3; ++i) {
            m.lock();
            m.unlock();
        }
        if (errors_reported().main_count() != 0) {
            throw std::runtime_error("warm-up release failed: " + errors_reported().last_main());
        }
    }

    void acquire() override { mutex_.lock(); }

    void release() override {
        const long before = errors_reported().main_count();
        mutex_.unlock();  // noexcept: failures arrive through error_handler
        if (errors_reported().main_count() != before)
            throw std::runtime_error(errors_reported().last_main());
    }

private:
    std::chrono::milliseconds lease_;
    std::unique_ptr<dlock::backend> backend_;
    dlock::backend& client_;
    Lock mutex_;
};

std::unique_ptr<lock_driver> make_mutex(const config& c) {
    return std::make_unique<mutex_driver<>>(c, redis_url(c));
}

std::unique_ptr<lock_driver> make_fair(const config& c) {
    return std::make_unique<mutex_driver<dlock::fair_mutex>>(c, redis_url(c));
}

std::unique_ptr<lock_driver> make_reentrant(const config& c) {
    return std::make_unique<mutex_driver<dlock::recursive_mutex>>(c, redis_url(c));
}

std::unique_ptr<lock_driver> make_shared(const config& c) {
    return std::make_unique<mutex_driver<read_lock, dlock::shared_mutex>>(c, redis_url(c));
}

std::unique_ptr<lock_driver> make_semaphore(const config& c) {
    return std::make_unique<mutex_driver<one_permit>>(c, redis_url(c));
}

std::unique_ptr<lock_driver> make_sentinel(const config& c) {
    return std::make_unique<mutex_driver<>>(c, "redis-sentinel://" + server_list(c) + "/mymaster");
}

std::unique_ptr<lock_driver> make_redlock(const config& c) {
    return std::make_unique<mutex_driver<>>(c, "redlock://" + server_list(c));
}

#if DLOCK_HAS_ZOOKEEPER
std::unique_ptr<lock_driver> make_zk(const config& c) {
    return std::make_unique<mutex_driver<>>(c, "zk://" + server_list(c) + "/dlock-bench");
}
#endif
#if DLOCK_HAS_ETCD
std::unique_ptr<lock_driver> make_etcd(const config& c) {
    // With --tls-ca: etcds:// verified against that CA (docs/etcd.md).
    if (!c.tls_ca.empty()) {
        return std::make_unique<mutex_driver<>>(
            c, "etcds://" + server_list(c) + "/dlock-bench?tls_ca=" + c.tls_ca);
    }
    return std::make_unique<mutex_driver<>>(c, "etcd://" + server_list(c) + "/dlock-bench");
}
#endif

using driver_factory = std::function<std::unique_ptr<lock_driver>(const config&)>;

struct mode_info {
    std::string_view name;
    std::string_view settings;  ///< what --help says about it
    driver_factory make;        ///< empty: planned, not available in this build
};

/// Every mode the worker knows. Adding a lock type = one driver class + one row here.
const std::vector<mode_info>& modes() {
    static const std::vector<mode_info> all {
        {"mutex",
         "dlock::mutex over dlock::redis::client; url redis://<first --servers entry>, lease "
         "--ttl-ms, all other client and lock options at their defaults (renewal on, every "
         "lease/3)",
         make_mutex},
            {"redlock",
             "dlock::mutex over dlock::redlock::client; every --servers entry is an independent "
             "master "
             "(quorum N/2+1), lease --ttl-ms, all other options at their defaults",
             make_redlock},
            {"sentinel",
             "dlock::mutex over dlock::redis::client on a Sentinel set: url "
             "redis-sentinel://<every --servers entry, the sentinels>/mymaster; lease and other "
             "options as for mutex",
             make_sentinel},
            {"fair",
             "dlock::fair_mutex over dlock::redis::client (FIFO queue, direct hand-off); url, "
             "lease "
             "and other options as for mutex",
             make_fair},
            {"reentrant",
             "dlock::recursive_mutex over dlock::redis::client (one level per cycle: a hash with a "
             "per-owner counter); url, lease and other options as for mutex",
             make_reentrant},
            {"shared",
             "the read side of dlock::shared_mutex over dlock::redis::client (lock_shared / "
             "unlock_shared; readers overlap by design, so the analyser counts overlaps instead of "
             "reporting violations); url, lease and other options as for mutex",
             make_shared},
            {"semaphore",
             "dlock::counting_semaphore with 1 permit over dlock::redis::client (acquire / release "
             "of "
             "one permit; permit-expirable grants); url, lease and other options as for mutex",
             make_semaphore},
#if DLOCK_HAS_ZOOKEEPER
            {"zk",
             "dlock::mutex over dlock::zk::client; url zk://<every --servers entry>/dlock-bench "
             "(the "
             "ensemble), lease --ttl-ms (validated; the grant lives with the ZooKeeper session), "
             "all "
             "other options at their defaults",
             make_zk},
#endif
#if DLOCK_HAS_ETCD
            {"etcd",
             "dlock::mutex over dlock::etcd::client (etcd's lock recipe, the keys etcdctl lock "
             "writes); url etcd://<every --servers entry>/dlock-bench (the cluster), lease "
             "--ttl-ms (validated; the grant lives with the client's etcd lease), all other "
             "options at their defaults",
             make_etcd},
#endif
    };
    return all;
}

std::string available_modes() {
    std::string out;
    for (const auto& m : modes()) {
        if (!m.make) continue;
        if (!out.empty()) out += ", ";
        out += m.name;
    }
    return out;
}

// --- command line (§1) ---------------------------------------------------------------------

void print_help(std::FILE* to) {
    std::fprintf(
        to,
        "usage: dlock-bench-worker --key K --out FILE (--duration-s S | --ops N) [options]\n"
        "\n"
        "Benchmark worker protocol v1: waits for --start-at-ns (CLOCK_MONOTONIC ns), runs\n"
        "blocking acquire / busy-wait critical section / release cycles on lock K until\n"
        "start + S seconds (or N cycles), then writes JSON Lines to FILE (via FILE.tmp).\n"
        "\n"
        "  --mode M          lock type under test (default mutex), see below\n"
        "  --key K           lock name, [A-Za-z0-9:_.-]+; same K = same lock\n"
        "  --duration-s S    loop until start + S seconds (float)\n"
        "  --ops N           stop after N cycles (whichever comes first)\n"
        "  --worker-id I     integer >= 0, written into every record (default 0)\n"
        "  --out FILE        result file (required)\n"
        "  --servers LIST    host:port[,host:port...] (default 127.0.0.1:6379)\n"
        "  --cs-us U         busy-wait critical section in microseconds (default 0)\n"
        "  --ttl-ms T        lease in milliseconds (default 10000)\n"
        "  --start-at-ns T   common start instant, CLOCK_MONOTONIC ns; 0 = now (default)\n"
        "  --tls-ca FILE     Redis over TLS: rediss://<server>?tls_ca=FILE (single-server modes);\n"
        "                    etcd: etcds://<servers>/dlock-bench?tls_ca=FILE\n"
        "  --help            this text\n"
        "\n"
        "Modes available in this build:\n");
    for (const auto& m : modes()) {
        if (m.make)
            std::fprintf(to, "  %-10s %.*s\n", std::string(m.name).c_str(),
                         static_cast<int>(m.settings.size()), m.settings.data());
    }
    std::fprintf(to, "Planned (rejected with exit 64 until they exist):\n");
    for (const auto& m : modes()) {
        if (!m.make)
            std::fprintf(to, "  %-10s %.*s\n", std::string(m.name).c_str(),
                         static_cast<int>(m.settings.size()), m.settings.data());
    }
    std::fprintf(to,
                 "\nExit status: 0 when FILE was written (even if some cycles failed), 64 for bad\n"
                 "arguments, 1 when no file could be written (warm-up or write failure).\n");
}

[[noreturn]] void bad_args(const std::string& why) {
    std::fprintf(stderr, "dlock-bench-worker: %s (see --help)\n", why.c_str());
    std::exit(exit_bad_args);
}

long long parse_int(std::string_view name, std::string_view text, long long low) {
    long long v = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, err] = std::from_chars(text.data(), end, v);
    if (text.empty() || err != std::errc{} || ptr != end || v < low) {
        bad_args(std::string(name) + " needs an integer >= " + std::to_string(low) + ", got '" +
                 std::string(text) + "'");
    }
    return v;
}

double parse_seconds(std::string_view name, std::string_view text) {
    double v = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, err] = std::from_chars(text.data(), end, v);
    if (text.empty() || err != std::errc{} || ptr != end || !std::isfinite(v) || v < 0) {
        bad_args(std::string(name) + " needs a number >= 0, got '" + std::string(text) + "'");
    }
    return v;
}

bool valid_key(std::string_view k) {
    return !k.empty() && std::all_of(k.begin(), k.end(), [](char ch) {
        return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
               ch == ':' || ch == '_' || ch == '.' || ch == '-';
    });
}

std::vector<std::string> split_servers(std::string_view list) {
    std::vector<std::string> out;
    while (true) {
        const auto comma = list.find(',');
        const auto item = list.substr(0, comma);
        if (item.empty() || item.find(':') == std::string_view::npos) {
            bad_args("--servers needs host:port[,host:port...], got '" + std::string(list) + "'");
        }
        out.emplace_back(item);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
    return out;
}

config parse(std::span<char*> args) {
    config c;
    bool have_key = false;
    bool have_out = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string_view name = args[i];
        std::string_view value;
        bool inline_value = false;
        if (name == "--help" || name == "-h") {
            print_help(stdout);
            std::exit(0);
        }
        if (!name.starts_with("--")) bad_args("unexpected argument '" + std::string(name) + "'");
        if (const auto eq = name.find('='); eq != std::string_view::npos) {  // also --name=value
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
            inline_value = true;
        }
        if (!inline_value) {
            if (i + 1 >= args.size()) bad_args(std::string(name) + " needs a value");
            value = args[++i];
        }
        if (name == "--mode")
            c.mode = value;
        else if (name == "--key")
            c.key = value, have_key = true;
        else if (name == "--duration-s")
            c.duration_s = parse_seconds(name, value);
        else if (name == "--ops")
            c.ops = parse_int(name, value, 0);
        else if (name == "--worker-id")
            c.worker_id = parse_int(name, value, 0);
        else if (name == "--out")
            c.out = value, have_out = true;
        else if (name == "--servers")
            c.servers = split_servers(value);
        else if (name == "--tls-ca")
            c.tls_ca = value;
        else if (name == "--cs-us")
            c.cs_us = parse_int(name, value, 0);
        else if (name == "--ttl-ms")
            c.ttl_ms = parse_int(name, value, 1);
        else if (name == "--start-at-ns")
            c.start_at_ns = parse_int(name, value, 0);
        else
            bad_args("unknown option '" + std::string(name) + "'");
    }
    if (!have_out || c.out.empty()) bad_args("--out FILE is required");
    if (!have_key || !valid_key(c.key))
        bad_args("--key is required and must match [A-Za-z0-9:_.-]+");
    if (c.duration_s < 0 && c.ops < 0) bad_args("give --duration-s or --ops");
    const auto m = std::find_if(modes().begin(), modes().end(),
                                [&](const auto& x) { return x.name == c.mode; });
    if (m == modes().end()) {
        bad_args("unknown mode '" + c.mode + "'; available: " + available_modes());
    }
    if (!m->make) {
        bad_args("mode '" + c.mode +
                 "' is not available in this build yet; available: " + available_modes());
    }
    return c;
}

// --- the measurement loop (§3) -------------------------------------------------------------

struct cycle {
    std::int64_t acq;
    std::int64_t rel;
    std::int64_t wait_ns;
};

struct error_event {
    std::int64_t t;
    std::string msg;
};

void sleep_until_ns(std::int64_t t) {
    // Sleep to 200 µs before, then spin: a timer wake-up can be late by tens of µs.
    const std::int64_t sleep_to = t - 200'000;
    if (now_ns() < sleep_to) {
        timespec ts{static_cast<time_t>(sleep_to / 1'000'000'000),
                    static_cast<long>(sleep_to % 1'000'000'000)};
        while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
        }
    }
    while (now_ns() < t) {
    }
}

bool write_file(const config& c, const std::vector<cycle>& cycles,
                const std::vector<nlohmann::json>& events, long errors, long lib_retries,
                long background_errors) {
    const std::string tmp = c.out + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
        std::fprintf(stderr, "dlock-bench-worker: cannot write %s: %s\n", tmp.c_str(),
                     std::strerror(errno));
        return false;
    }
    static char buffer[1 << 16];
    std::setvbuf(f, buffer, _IOFBF, sizeof buffer);
    const long long w = c.worker_id;
    for (const auto& e : events) std::fprintf(f, "%s\n", e.dump().c_str());
    for (const auto& r : cycles) {
        std::fprintf(f, "{\"w\":%lld,\"acq\":%lld,\"rel\":%lld,\"wait_ns\":%lld}\n", w,
                     static_cast<long long>(r.acq), static_cast<long long>(r.rel),
                     static_cast<long long>(r.wait_ns));
    }
    const nlohmann::json done{{"w", w},
                              {"event", "done"},
                              {"cycles", cycles.size()},
                              {"errors", errors},
                              {"lib_retries", lib_retries},
                              {"mode", c.mode},
                              {"background_errors", background_errors}};
    std::fprintf(f, "%s\n", done.dump().c_str());
    const bool ok = std::ferror(f) == 0;
    if (std::fclose(f) != 0 || !ok) {
        std::fprintf(stderr, "dlock-bench-worker: writing %s failed\n", tmp.c_str());
        return false;
    }
    if (std::rename(tmp.c_str(), c.out.c_str()) != 0) {
        std::fprintf(stderr, "dlock-bench-worker: rename to %s: %s\n", c.out.c_str(),
                     std::strerror(errno));
        return false;
    }
    return true;
}

int run(const config& c) {
    const auto& info = *std::find_if(modes().begin(), modes().end(),
                                     [&](const auto& x) { return x.name == c.mode; });
    std::unique_ptr<lock_driver> driver;
    try {
        driver = info.make(c);
    } catch (const dlock::error& e) {
        if (e.code() == dlock::errc::invalid_argument)
            bad_args(e.what());  // e.g. --ttl-ms out of range
        std::fprintf(stderr, "dlock-bench-worker: %s\n", e.what());
        return exit_failed;
    }
    try {
        driver->warm_up(c.key + ":warmup:" + std::to_string(c.worker_id));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dlock-bench-worker: warm-up failed: %s\n", e.what());
        return exit_failed;
    }

    // Memory for the records up front (§3 rule 4): ~200k cycles/s is far above what a loopback
    // lock reaches; beyond that the vector grows, which is rare and only costs a copy.
    std::vector<cycle> cycles;
    const double expected = c.duration_s >= 0 ? std::min(c.duration_s, 60.0) * 200'000 : 1e6;
    cycles.reserve(
        static_cast<std::size_t>(c.ops >= 0 ? std::min<double>(static_cast<double>(c.ops), expected)
                                            : expected) +
        16);
    std::vector<nlohmann::json> events;

    std::int64_t start = now_ns();
    if (c.start_at_ns > 0) {
        if (start < c.start_at_ns) {
            sleep_until_ns(c.start_at_ns);
        } else {
            events.push_back(
                {{"w", c.worker_id}, {"event", "late_start"}, {"late_ns", start - c.start_at_ns}});
        }
        start = c.start_at_ns;
    }
    const std::int64_t deadline =
        c.duration_s >= 0 ? start + static_cast<std::int64_t>(std::llround(c.duration_s * 1e9))
                          : INT64_MAX;
    const std::int64_t cs_ns = c.cs_us * 1000;
    long errors = 0;
    std::vector<error_event> failures;

    while (errors < max_errors) {
        if (now_ns() >= deadline) break;
        if (c.ops >= 0 && static_cast<long long>(cycles.size()) >= c.ops) break;
        const std::int64_t t0 = now_ns();
        try {
            driver->acquire();
        } catch (const std::exception& e) {
            ++errors;
            if (failures.size() < max_error_events)
                failures.push_back({now_ns(), std::string("acquire: ") + e.what()});
            std::this_thread::sleep_for(1ms);
            continue;
        }
        const std::int64_t t_acq = now_ns();
        if (cs_ns > 0) {
            while (now_ns() < t_acq + cs_ns) {
            }
        }
        const std::int64_t t_rel = now_ns();
        try {
            driver->release();
        } catch (const std::exception& e) {
            ++errors;
            if (failures.size() < max_error_events)
                failures.push_back({now_ns(), std::string("release: ") + e.what()});
            std::this_thread::sleep_for(1ms);
        }
        // The cycle happened (the lock was held over [t_acq, t_rel]) even if its release failed.
        cycles.push_back({t_acq, t_rel, t_acq - t0});
    }

    for (const auto& f : failures) {
        events.push_back({{"w", c.worker_id}, {"event", "error"}, {"t", f.t}, {"msg", f.msg}});
    }
    if (!write_file(c, cycles, events, errors, driver->lib_retries(),
                    errors_reported().background_count())) {
        return exit_failed;
    }
    std::fflush(nullptr);
    std::_Exit(0);  // §3 rule 8: the client's background thread must not delay the exit
}

}  // namespace

int main(int argc, char** argv) {
    const config c = parse(std::span<char*>(argv + 1, static_cast<std::size_t>(argc - 1)));
    return run(c);
}
