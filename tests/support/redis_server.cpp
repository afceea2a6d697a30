#include "redis_server.hpp"

#include <fcntl.h>
#include <hiredis.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "spawn.hpp"
#include "test_env.hpp"

namespace dlock::test {

namespace {

constexpr int max_port_attempts = 5;
constexpr auto start_deadline = std::chrono::seconds(10);

struct context_deleter {
    void operator()(redisContext* c) const { redisFree(c); }
};
struct reply_deleter {
    void operator()(redisReply* r) const { freeReplyObject(r); }
};
using context_ptr = std::unique_ptr<redisContext, context_deleter>;
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

timeval to_timeval(std::chrono::milliseconds d) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(d.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
    if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;  // 0 would mean "no timeout"
    return tv;
}

void render(const redisReply* r, std::string& out) {
    switch (r->type) {
        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS:
        case REDIS_REPLY_ERROR: out.append(r->str, r->len); break;
        case REDIS_REPLY_INTEGER: out.append(std::to_string(r->integer)); break;
        case REDIS_REPLY_NIL: out.append("(nil)"); break;
        case REDIS_REPLY_ARRAY:
            for (size_t i = 0; i < r->elements; ++i) {
                if (i != 0) out.push_back('\n');
                render(r->element[i], out);
            }
            break;
        default: out.append("(unknown reply type ").append(std::to_string(r->type)).append(")");
    }
}

reply_ptr run_argv(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    return reply_ptr(static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

// One command on a fresh connection; throws on any I/O failure.
std::string one_command(std::uint16_t port, const std::string& password,
                        const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
    if (args.empty()) throw std::invalid_argument("redis_server::command: no arguments");
    const timeval tv = to_timeval(timeout);
    context_ptr c(redisConnectWithTimeout("127.0.0.1", port, tv));
    const std::string where = "127.0.0.1:" + std::to_string(port);
    if (!c) throw std::runtime_error("redis " + where + ": cannot allocate context");
    if (c->err) throw std::runtime_error("redis " + where + ": connect: " + c->errstr);
    if (redisSetTimeout(c.get(), tv) != REDIS_OK) {
        throw std::runtime_error("redis " + where + ": cannot set timeout");
    }
    if (!password.empty()) {
        reply_ptr auth = run_argv(c.get(), {"AUTH", password});
        if (!auth) throw std::runtime_error("redis " + where + ": AUTH: " + c->errstr);
    }
    reply_ptr reply = run_argv(c.get(), args);
    if (!reply) throw std::runtime_error("redis " + where + ": " + args[0] + ": " + c->errstr);
    std::string out;
    render(reply.get(), out);
    return out;
}

std::string find_password(const std::vector<std::string>& args) {
    std::string password;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--requirepass" && i + 1 < args.size()) {
            password = args[i + 1];
        } else if (args[i].rfind("--requirepass ", 0) == 0) {
            password = args[i].substr(std::strlen("--requirepass "));
        }
    }
    return password;
}

std::string redis_binary() {
    if (const char* env = std::getenv("DLOCK_REDIS_SERVER"); env != nullptr && *env != '\0') {
        return env;
    }
    if (const char* path = std::getenv("PATH"); path != nullptr) {
        std::stringstream dirs(path);
        for (std::string d; std::getline(dirs, d, ':');) {
            if (d.empty()) continue;
            const std::string candidate = d + "/redis-server";
            if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        }
    }
    return "/usr/bin/redis-server";
}

std::uintmax_t file_size_or_zero(const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0 : size;
}

std::string read_from(const std::string& path, std::uintmax_t offset) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    in.seekg(static_cast<std::streamoff>(offset));
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

redis_server::redis_server(redis_server_options options)
    : options_(std::move(options)), password_(find_password(options_.extra_args)) {
    char tmpl[] = "/tmp/dlock-redis.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
        throw std::runtime_error(std::string("redis_server: mkdtemp: ") + std::strerror(errno));
    }
    dir_ = tmpl;
    try {
        if (!options_.sentinel_config.empty()) {
            std::ofstream(dir_ + "/sentinel.conf") << options_.sentinel_config;
        }
        std::string why;
        for (int attempt = 1; attempt <= max_port_attempts; ++attempt) {
            port_ = free_port();
            if (!options_.tls_dir.empty()) {
                do {
                    tls_port_ = free_port();
                } while (tls_port_ == port_);
            }
            const std::string log = dir_ + "/redis.log";
            const auto log_offset = file_size_or_zero(log);
            spawn();
            if (wait_ready(why)) return;
            const bool port_taken =
                why.find("another server") != std::string::npos ||
                read_from(log, log_offset).find("Address already in use") != std::string::npos;
            kill_and_reap();
            if (!port_taken) break;
            why += " (attempt " + std::to_string(attempt) + ")";
        }
        throw std::runtime_error(
            "redis_server: could not start redis-server on 127.0.0.1:" + std::to_string(port_) +
            ": " + why + "\n--- log tail ---\n" + log_tail());
    } catch (...) {
        kill_and_reap();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        throw;
    }
}

redis_server::~redis_server() {
    kill_and_reap();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

std::uint16_t redis_server::port() const { return port_; }
std::string redis_server::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
std::uint16_t redis_server::tls_port() const { return tls_port_; }
std::string redis_server::tls_url() const {
    return "rediss://127.0.0.1:" + std::to_string(tls_port_);
}
const std::string& redis_server::dir() const { return dir_; }
pid_t redis_server::pid() const { return pid_; }
bool redis_server::running() const { return pid_ > 0; }

void redis_server::spawn() {
    // clang-format off
    std::vector<std::string> argv = {
        "redis-server",
        "--port", std::to_string(port_),
        "--bind", "127.0.0.1",
        "--dir", dir_,
        "--save", "",
        "--enable-debug-command", "local",
        "--protected-mode", "no",
        "--daemonize", "no",
        "--logfile", dir_ + "/redis.log",
    };
    // clang-format on
    if (!options_.sentinel_config.empty()) {
        argv.insert(argv.begin() + 1, {dir_ + "/sentinel.conf", "--sentinel"});
    }
    if (options_.appendonly) {
        argv.insert(argv.end(), {"--appendonly", "yes", "--appendfsync", "always"});
    } else {
        argv.insert(argv.end(), {"--appendonly", "no"});
    }
    if (!options_.tls_dir.empty()) {
        const auto& d = options_.tls_dir;
        argv.insert(argv.end(),
                    {"--tls-port", std::to_string(tls_port_), "--tls-cert-file", d + "/server.pem",
                     "--tls-key-file", d + "/server.key", "--tls-ca-cert-file", d + "/ca.pem",
                     "--tls-auth-clients", "optional"});
    }
    argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());

    // Anything redis prints before it opens its log file (bad arguments) lands here.
    const std::string out_path = dir_ + "/redis.stdout";
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    try {
        pid_ = detail::spawn(redis_binary(), argv, out);
    } catch (...) {
        if (out >= 0) ::close(out);
        throw;
    }
    if (out >= 0) ::close(out);
    paused_ = false;
}

bool redis_server::wait_ready(std::string& why) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + scaled(start_deadline);
    const std::string our_pid = "process_id:" + std::to_string(pid_) + "\r";
    for (;;) {
        int raw = 0;
        if (detail::wait_for(pid_, std::chrono::milliseconds(0), raw)) {
            pid_ = -1;
            why = "redis-server exited with status " + std::to_string(detail::decode_status(raw));
            return false;
        }
        try {
            const std::string pong =
                one_command(port_, password_, {"PING"}, std::chrono::milliseconds(250));
            if (pong == "PONG") {
                // A PONG may come from someone else's server that took the port first.
                const std::string info =
                    one_command(port_, password_, {"INFO", "server"}, scaled(start_deadline));
                if (info.find(our_pid) != std::string::npos) return true;
                why = "another server answers on the port";
                return false;
            }
            why = "PING answered: " + pong;  // e.g. LOADING while the AOF is read
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (clock::now() >= deadline) {
            why = "no PONG within " + std::to_string(scaled(start_deadline).count()) +
                  " ms; last: " + why;
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

void redis_server::kill_and_reap() {
    detail::kill_now(pid_);
    paused_ = false;
}

std::string redis_server::log_tail() const {
    constexpr std::uintmax_t tail = 4000;
    std::string out;
    for (const char* name : {"/redis.stdout", "/redis.log"}) {
        const std::string path = dir_ + name;
        const auto size = file_size_or_zero(path);
        const std::string text = read_from(path, size > tail ? size - tail : 0);
        if (!text.empty()) out.append("[").append(name + 1).append("]\n").append(text);
    }
    return out;
}

void redis_server::stop() {
    detail::terminate(pid_, scaled(start_deadline));
    paused_ = false;
}

void redis_server::kill9() {
    if (pid_ <= 0) return;
    kill_and_reap();
}

void redis_server::start() {
    if (pid_ > 0) return;
    spawn();
    std::string why;
    if (wait_ready(why)) return;
    kill_and_reap();
    throw std::runtime_error(
        "redis_server::start: redis-server on 127.0.0.1:" + std::to_string(port_) +
        " did not come up: " + why + "\n--- log tail ---\n" + log_tail());
}

void redis_server::pause() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGSTOP);
    paused_ = true;
}

void redis_server::resume() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    paused_ = false;
}

std::map<std::string, long> redis_server::command_calls() const {
    std::map<std::string, long> calls;
    std::istringstream lines(command({"INFO", "commandstats"}));
    for (std::string line; std::getline(lines, line);) {
        const auto colon = line.find(':');
        const auto at = line.find("calls=");
        if (!line.starts_with("cmdstat_") || colon == std::string::npos || at == std::string::npos)
            continue;
        const auto name = line.substr(8, colon - 8);
        if (name == "info" || name.starts_with("config")) continue;
        calls[name] = std::stol(line.substr(at + 6));
    }
    return calls;
}

std::string redis_server::command(const std::vector<std::string>& args) const {
    return one_command(port_, password_, args, scaled(std::chrono::seconds(1)));
}

std::string redis_server::command(const std::vector<std::string>& args,
                                  std::chrono::milliseconds timeout) const {
    return one_command(port_, password_, args, timeout);
}

}  // namespace dlock::test
