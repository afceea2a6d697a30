// dlock-test-server: the tests' private server fixtures (redis_server, zk_ensemble) as a process,
// for tools that are not C++ test binaries (bench/run), so that every private server in the repo
// is started, checked for readiness and torn down by one piece of code.
//
//   dlock-test-server redis [REDIS-ARG...]     extra arguments go to redis-server
//   dlock-test-server redis-tls [REDIS-ARG...] the same, also serving TLS (tls_certs.hpp): the
//                                              JSON line adds "tls_port" and "ca" (its CA file)
//   dlock-test-server zk [--tick-ms N] [--force-sync yes|no]
//   dlock-test-server etcd                     one etcd member (etcd_server.hpp); "dir" and "log"
//                                              are empty (the fixture keeps them to itself)
//
// Once the server serves, prints ONE line of JSON to stdout and flushes it:
//   {"port":P,"pid":N,"dir":"...","url":"...","log":"..."}
// (pid and dir are the server's, log its log file), then waits until its stdin reaches end of file
// (the parent closed the pipe or died) or it gets SIGTERM/SIGINT/SIGHUP, stops the server
// gracefully and removes its directory. The server is started with PR_SET_PDEATHSIG=SIGKILL, so it
// also dies when this process is killed. Exit status: 0 after a normal stop; 1 if the server did
// not come up (the reason on stderr); 2 for bad usage.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/config.hpp>

#include "redis_server.hpp"
#include "tls_certs.hpp"
#if DLOCK_HAS_ETCD
#include "etcd_server.hpp"
#endif
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif

namespace {

int usage(const std::string& why) {
    std::cerr << "dlock-test-server: " << why
              << "\nusage: dlock-test-server redis|redis-tls [REDIS-ARG...]\n"
                 "       dlock-test-server zk [--tick-ms N] [--force-sync yes|no]\n"
                 "       dlock-test-server etcd\n";
    return 2;
}

std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

void announce(unsigned port, pid_t pid, const std::string& dir, const std::string& url,
              const std::string& log, const std::string& more = "") {
    std::cout << "{\"port\":" << port << ",\"pid\":" << pid << ",\"dir\":" << json_string(dir)
              << ",\"url\":" << json_string(url) << ",\"log\":" << json_string(log) << more << "}"
              << std::endl;
}

// Blocks until stdin is at end of file (or fails) or one of SIGTERM/SIGINT/SIGHUP arrives. The
// signals are blocked in every thread first and read with sigtimedwait, so no handler runs
// inside the fixtures' code.
void wait_for_stop(const sigset_t& stop_signals) {
    for (;;) {
        const timespec tick{0, 100'000'000};
        if (::sigtimedwait(&stop_signals, nullptr, &tick) > 0) return;
        pollfd p{0, POLLIN, 0};
        if (::poll(&p, 1, 0) == 1) {
            char buf[256];
            const auto n = ::read(0, buf, sizeof buf);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
        }
    }
}

// Used by the zk server only: unused in a build without ZooKeeper.
[[maybe_unused]] std::optional<unsigned> parse_ms(std::string_view s) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v == 0) return std::nullopt;
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) return usage("which server?");
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    for (const int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_signals, s);
    // Before any thread exists, so every thread inherits the mask.
    ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    try {
        if (args[0] == "redis") {
            dlock::test::redis_server server(
                dlock::test::redis_server_options{.extra_args = {args.begin() + 1, args.end()}});
            announce(server.port(), server.pid(), server.dir(), server.url(),
                     server.dir() + "/redis.log");
            wait_for_stop(stop_signals);
            server.stop();
            return 0;
        }
        if (args[0] == "redis-tls") {
            const dlock::test::tls_certs certs;
            dlock::test::redis_server server(dlock::test::redis_server_options{
                .extra_args = {args.begin() + 1, args.end()}, .tls_dir = certs.dir()});
            announce(server.port(), server.pid(), server.dir(), server.url(),
                     server.dir() + "/redis.log",
                     ",\"tls_port\":" + std::to_string(server.tls_port()) +
                         ",\"ca\":" + json_string(certs.ca()));
            wait_for_stop(stop_signals);
            server.stop();
            return 0;
        }
        if (args[0] == "zk") {
#if !DLOCK_HAS_ZOOKEEPER
            return usage("this build has no ZooKeeper (DLOCK_WITH_ZOOKEEPER=OFF)");
#else
            dlock::test::zk_ensemble_options options{.tick = std::chrono::milliseconds(2000),
                                                     .addresses = {},
                                                     .wrappers = {},
                                                     .force_sync = true};
            for (std::size_t i = 1; i < args.size(); i += 2) {
                if (i + 1 >= args.size()) return usage(args[i] + " needs a value");
                if (args[i] == "--tick-ms") {
                    const auto ms = parse_ms(args[i + 1]);
                    if (!ms) return usage("--tick-ms wants a positive integer");
                    options.tick = std::chrono::milliseconds(*ms);
                } else if (args[i] == "--force-sync") {
                    if (args[i + 1] != "yes" && args[i + 1] != "no")
                        return usage("--force-sync wants yes or no");
                    options.force_sync = args[i + 1] == "yes";
                } else {
                    return usage("unknown option " + args[i]);
                }
            }
            dlock::test::zk_ensemble server(1, options);
            announce(server.client_port(0), server.pid(0), server.dir(0), server.url(),
                     server.dir(0) + "/zk.log");
            wait_for_stop(stop_signals);
            server.stop(0);
            return 0;
#endif
        }
        if (args[0] == "etcd") {
#if !DLOCK_HAS_ETCD
            return usage("this build has no etcd (DLOCK_WITH_ETCD=OFF)");
#else
            if (args.size() > 1) return usage("etcd takes no options");
            // On disk, fsynced as in production: the benchmarks time etcd's writes.
            dlock::test::etcd_cluster server(1, {.data_in_memory = false});
            announce(server.client_port(0), server.pid(0), "", server.url(), "");
            wait_for_stop(stop_signals);
            server.stop(0);
            return 0;
#endif
        }
        return usage("unknown server " + args[0]);
    } catch (const std::exception& e) {
        std::cerr << "dlock-test-server: " << e.what() << "\n";
        return 1;
    }
}
