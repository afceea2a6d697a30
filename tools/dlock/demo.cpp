// `dlock demo`: the oversell scenario (examples/oversell_shop.hpp, the same shop as
// examples/oversell.cpp) as a newcomer's first run. W worker processes sell from one stock count
// kept in Redis, first without a lock, then with each sale under a dlock::mutex. Workers are this
// same binary re-executed with the hidden `__demo-worker` subcommand (posix_spawn of
// /proc/self/exe: never fork without exec in a threaded process).
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "cli.hpp"
#include "oversell_shop.hpp"
#include "duration.hpp"
#include "process.hpp"

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using dlock::redis::reply;

/// The Redis keys of one demo run and mode. The run id keeps concurrent demos on one server apart.
struct demo_keys {
    std::string stock, sold, lock_name;
};

demo_keys keys_for(const std::string& run_id, const std::string& mode) {
    return {fmt::format("dlock-demo:{}:{}:stock", run_id, mode),
            fmt::format("dlock-demo:{}:{}:sold", run_id, mode),
            fmt::format("dlock-demo/{}", run_id)};
}

using oversell::checked;

/// Why the demo refuses zk://: its stock is a Redis key, on the first server of the URL.
constexpr std::string_view demo_needs_redis = "demo: the demo keeps its stock in Redis, so it";
using oversell::read_count;

struct mode_result {
    long long sold = 0;
    long long oversold = 0;
    std::chrono::milliseconds wall{};
    int failed_workers = 0;
};

/// The parent: starts the workers of one mode, waits for them, reads the outcome.
class demo_runner {
public:
    demo_runner(const demo_options& o, signal_watch& signals, dlock::redis::client& client,
                std::string url, std::string run_id)  // client: the server holding the stock
        : o_(o),
          signals_(signals),
          client_(client),
          url_(std::move(url)),
          run_id_(std::move(run_id)) {}

    mode_result run_mode(const std::string& mode) {
        const auto keys = keys_for(run_id_, mode);
        checked(client_, {"SET", keys.stock, std::to_string(o_.stock)});
        checked(client_, {"DEL", keys.sold});

        const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
        std::vector<pid_t> workers;
        pid_t group = 0;  // all workers share one process group: the first one's
        const auto started = steady::now();
        for (int i = 0; i < o_.workers; ++i) {
            std::vector<std::string> args{self,      "__demo-worker",  "--url",  url_,
                                          "--run",   run_id_,          "--mode", mode,
                                          "--index", std::to_string(i)};
            if (o_.node_timeout) {
                args.insert(args.end(),
                            {"--node-timeout-ms", std::to_string(o_.node_timeout->count())});
            }
            int error = 0;
            const pid_t pid = spawn_process(
                args, {.new_process_group = group == 0, .process_group = group}, error);
            if (pid < 0) {
                stop_workers(workers, group);
                throw cli_error(exit_status::os_error, fmt::format("cannot start a worker ({}): {}",
                                                                   self, errno_text(error)));
            }
            if (group == 0) group = pid;
            workers.push_back(pid);
        }
        mode_result result;
        std::size_t running = workers.size();
        std::vector<bool> reaped(workers.size(), false);
        while (running > 0) {
            pollfd p{signals_.fd(), POLLIN, 0};
            ::poll(&p, 1, -1);
            while (const auto info = signals_.next()) {
                const int sig = static_cast<int>(info->ssi_signo);
                if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
                    stop_workers(workers, group);
                    interrupted_ = sig;
                    std::error_code ignored;  // best effort: the keys are this run's alone
                    client_.command({"DEL", keys.stock, keys.sold}, ignored);
                    return result;
                }
            }
            for (std::size_t i = 0; i < workers.size(); ++i) {
                int raw = 0;
                if (!reaped[i] && ::waitpid(workers[i], &raw, WNOHANG) == workers[i]) {
                    reaped[i] = true;
                    --running;
                    if (decode_wait_status(raw) != 0) ++result.failed_workers;
                }
            }
        }
        result.wall =
            std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - started);
        result.sold = read_count(client_, keys.sold);
        result.oversold = std::max(0LL, result.sold - o_.stock);
        // Leave nothing behind on a shared server (the lock's keys: see demo_command).
        checked(client_, {"DEL", keys.stock, keys.sold});
        return result;
    }

    /// The signal that interrupted the demo, or 0.
    int interrupted() const noexcept { return interrupted_; }

private:
    static void stop_workers(const std::vector<pid_t>& workers, pid_t group) {
        if (group != 0) ::kill(-group, SIGTERM);
        for (const pid_t pid : workers) {
            int raw = 0;
            while (::waitpid(pid, &raw, 0) < 0 && errno == EINTR) {
            }
        }
    }

    const demo_options& o_;
    signal_watch& signals_;
    dlock::redis::client& client_;
    std::string url_;
    std::string run_id_;
    int interrupted_ = 0;
};

std::string random_run_id() {
    std::random_device rd;  // a name for this run's keys, not a secret
    return fmt::format("{:08x}", rd());
}

void print_summary(const demo_options& o, const mode_result& unlocked, const mode_result& locked,
                   const std::string& lock_name) {
    const auto ms = [](std::chrono::milliseconds d) { return fmt::format("{}ms", d.count()); };
    std::printf("\n%-14s %16s %12s\n", "", "without a lock", "with dlock");
    std::printf("%-14s %16lld %12lld\n", "sold", unlocked.sold, locked.sold);
    std::printf("%-14s %16lld %12lld\n", "oversold", unlocked.oversold, locked.oversold);
    std::printf("%-14s %16s %12s\n\n", "wall time", ms(unlocked.wall).c_str(),
                ms(locked.wall).c_str());
    if (unlocked.oversold > 0) {
        std::printf(
            "Without a lock, workers read the same count and overwrite each other's writes:\n"
            "%lld sales of items that did not exist.\n",
            unlocked.oversold);
    } else {
        std::printf(
            "This time the unlocked run happened not to oversell; the race is still there (try\n"
            "more --workers).\n");
    }
    std::printf(
        "With dlock, each read-pause-write held the lock \"%s\": exactly %d sold.\n"
        "The same for any command: dlock run NAME -- COMMAND (see dlock run --help).\n",
        lock_name.c_str(), o.stock);
}

}  // namespace

int demo_command(const demo_options& o) {
    // Signals first (nothing has started a thread yet), so a Ctrl-C is handled in order: workers
    // stopped, keys removed, the private servers stopped and their files deleted.
    signal_watch signals;
    std::vector<std::unique_ptr<embedded_redis>> servers;
    std::string url;
    if (o.url) {
        url = *o.url;
    } else {
        const int count = o.redlock ? 3 : 1;
        std::vector<std::string> hosts;
        for (int i = 0; i < count; ++i) {
            servers.push_back(std::make_unique<embedded_redis>());
            hosts.push_back(servers.back()->url().substr(std::string_view("redis://").size()));
        }
        url = o.redlock ? "redlock://" + fmt::format("{}", fmt::join(hosts, ","))
                        : servers.front()->url();
    }
    lock_service service({.url = url, .key_prefix = "dlock", .node_timeout = o.node_timeout});
    dlock::redis::client& data = service.first_redis_server(demo_needs_redis);
    const std::string run_id = random_run_id();
    const auto locked_keys = keys_for(run_id, "locked");
    try {
        for (dlock::redis::client* server : service.servers()) server->ping();
        if (!servers.empty()) {
            std::vector<std::string> ports;
            ports.reserve(servers.size());
            for (const auto& s : servers) ports.push_back(s->url().substr(s->url().rfind(':') + 1));
            std::printf(
                "Started %s %s on 127.0.0.1, port%s %s (temporary; stopped and removed "
                "afterwards).\n",
                servers.size() == 1 ? "redis-server" : "3 redis-servers",
                servers.front()->version().c_str(), servers.size() == 1 ? "" : "s",
                fmt::format("{}", fmt::join(ports, ", ")).c_str());
        }
        std::printf(
            "%d worker processes sell from one stock of %d kept in Redis at %s.\n"
            "Each sale reads the stock, pauses 1-2 ms, then writes stock - 1.\n",
            o.workers, o.stock, redact_url(service.server_urls().front()).c_str());
        if (service.is_redlock()) {
            std::printf("The lock is a Redlock over %zu servers (quorum %zu).\n",
                        service.server_urls().size(), service.quorum());
        }
        std::fflush(stdout);

        demo_runner runner(o, signals, data, url, run_id);
        const mode_result unlocked = runner.run_mode("unlocked");
        mode_result locked;
        if (runner.interrupted() == 0) locked = runner.run_mode("locked");
        // The lock's keys, on every server (the stock's server's are among them). A worker
        // stopped by a Ctrl-C may have left the lock key itself behind.
        for (dlock::redis::client* server : service.servers()) {
            std::error_code ignored;
            server->command({"DEL", server->lock_key(locked_keys.lock_name),
                             server->fence_key(locked_keys.lock_name)},
                            ignored);
        }
        if (const int sig = runner.interrupted()) {
            std::fprintf(stderr, "dlock: %s: demo interrupted; cleaned up\n",
                         signal_name(sig).c_str());
            return 128 + sig;
        }
        print_summary(o, unlocked, locked, locked_keys.lock_name);
        int status = exit_status::ok;
        for (const auto& [name, r] :
             {std::pair{"unlocked", unlocked}, std::pair{"locked", locked}}) {
            if (r.failed_workers > 0) {
                std::fprintf(stderr, "dlock: %d %s worker(s) failed\n", r.failed_workers, name);
                status = exit_status::demo_failed;
            }
        }
        if (locked.sold != o.stock) {  // more is overselling, less is a lost sale
            std::fprintf(stderr, "dlock: the locked run sold %lld of a stock of %d\n", locked.sold,
                         o.stock);
            status = exit_status::demo_failed;
        }
        return status;
    } catch (const dlock::error& e) {
        throw to_cli_error(e, url);
    }
}

int demo_worker_command(const demo_worker_options& o) {
    const auto keys = keys_for(o.run_id, o.mode);
    try {
        lock_service service({.url = o.url, .key_prefix = "dlock", .node_timeout = o.node_timeout});
        dlock::redis::client& client = service.first_redis_server(demo_needs_redis);
        std::optional<dlock::mutex> mutex;
        if (o.mode == "locked") {
            mutex.emplace(service.backend(), keys.lock_name, dlock::lock_options{.lease = 10s});
        }
        oversell::sell_until_sold_out(client, keys.stock, keys.sold, mutex ? &*mutex : nullptr);
        return 0;
    } catch (const std::exception& e) {  // dlock::error, or a cli_error for the URL
        std::fprintf(stderr, "dlock: demo worker %d (%s): %s\n", o.index, o.mode.c_str(), e.what());
        return 1;
    }
}

}  // namespace dlock::cli
