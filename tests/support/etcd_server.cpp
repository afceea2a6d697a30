#include "etcd_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "spawn.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"

namespace dlock::test {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto start_deadline = std::chrono::seconds(30);
constexpr const char* etcd_binary = "/usr/bin/etcd";
constexpr const char* etcdctl_binary = "/usr/bin/etcdctl";

/// One HTTP/1.0 request to address:port; the whole answer, or "" without one within `timeout`.
std::string http(const std::string& address, std::uint16_t port, const std::string& method,
                 const std::string& path, const std::string& body,
                 std::chrono::milliseconds timeout) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) return {};
    addr.sin_port = htons(port);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return {};
    const auto deadline = clock::now() + timeout;
    const auto wait = [&](short events) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        return ::poll(&p, 1, static_cast<int>(left)) == 1;
    };
    const std::string request = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" +
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
                                body;
    int err = 0;
    socklen_t len = sizeof err;
    if ((::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
         errno != EINPROGRESS) ||
        !wait(POLLOUT) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0 ||
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(request.size())) {
        ::close(fd);
        return {};
    }
    std::string out;
    char buf[4096];
    while (wait(POLLIN)) {
        const auto n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

/// The value of "name":"<digits>" in a JSON text ("" if absent).
std::string json_number(const std::string& text, const std::string& name) {
    const auto at = text.find("\"" + name + "\":\"");
    if (at == std::string::npos) return {};
    const auto begin = at + name.size() + 4;
    const auto end = text.find('"', begin);
    return end == std::string::npos ? std::string{} : text.substr(begin, end - begin);
}

}  // namespace

etcd_cluster::etcd_cluster(std::size_t members) : etcd_cluster(members, {}) {}

etcd_cluster::etcd_cluster(std::size_t members, etcd_cluster_options options)
    : tls_(std::move(options.tls)), secure_(!tls_.cert.empty()) {
    // On a tmpfs where there is one (/dev/shm): etcd fsyncs every write, and on a disk that other
    // work keeps busy (a build beside the tests, the sanitizer stage's links) one fsync can take
    // many seconds (a LeaseGrant went unanswered for a CLI's whole 20 s connect timeout), which
    // would test the disk, not dlock. The Redis and ZooKeeper test servers do not fsync
    // either. A member killed and restarted still finds its data (the files stay).
    std::error_code shm_error;
    const bool shm = options.data_in_memory &&
                     std::filesystem::is_directory("/dev/shm", shm_error) &&
                     ::access("/dev/shm", W_OK | X_OK) == 0;
    std::string tmpl_text = std::string(shm ? "/dev/shm" : "/tmp") + "/dlock-etcd.XXXXXX";
    std::vector<char> tmpl(tmpl_text.begin(), tmpl_text.end());
    tmpl.push_back('\0');
    if (::mkdtemp(tmpl.data()) == nullptr)
        throw std::runtime_error(std::string("etcd_cluster: mkdtemp: ") + std::strerror(errno));
    dir_ = tmpl.data();
    token_ = "dlock-" + std::filesystem::path(dir_).filename().string();
    members_.resize(members);
    const auto start = [&] {
        std::set<std::uint16_t> used;
        const auto fresh = [&] {
            for (;;) {
                const auto p = free_port();
                if (used.insert(p).second) return p;
            }
        };
        for (std::size_t i = 0; i < members; ++i) {
            auto& m = members_[i];
            if (i < options.addresses.size()) m.address = options.addresses[i];
            if (i < options.wrappers.size()) m.wrapper = options.wrappers[i];
            m.client_port = fresh();
            m.peer_port = fresh();
            m.http_port = secure_ ? fresh() : m.client_port;
            m.dir = dir_ + "/" + std::to_string(i + 1);
            std::filesystem::create_directories(m.dir);
        }
        for (std::size_t i = 0; i < members; ++i) spawn(i);
        for (std::size_t i = 0; i < members; ++i) wait_healthy(i);
    };
    // Another process may bind a port between free_port() and the member's own bind.
    const auto port_taken = [&] {
        for (const auto& m : members_) {
            const auto log = read_tail(m.dir + "/etcd.log", 64 * 1024);
            if (log.find("address already in use") != std::string::npos) return true;
        }
        return false;
    };
    const auto clean_up = [&] {
        for (auto& m : members_) {
            if (m.pid > 0) {
                ::kill(m.pid, SIGKILL);
                detail::wait_blocking(m.pid);
                m.pid = -1;
            }
            std::error_code ec;
            if (!m.dir.empty()) std::filesystem::remove_all(m.dir, ec);
        }
    };
    try {
        start_on_free_ports(start, port_taken, clean_up);
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        throw;
    }
}

etcd_cluster::~etcd_cluster() {
    for (auto& m : members_) {
        if (m.pid > 0) {
            ::kill(m.pid, SIGKILL);
            detail::wait_blocking(m.pid);
            m.pid = -1;
        }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

std::string etcd_cluster::endpoint(std::size_t i) const {
    return members_.at(i).address + ":" + std::to_string(members_.at(i).client_port);
}

std::string etcd_cluster::endpoints() const {
    std::string out;
    for (std::size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out += ',';
        out += endpoint(i);
    }
    return out;
}

std::string etcd_cluster::url(std::string_view prefix) const {
    std::string out = (secure_ ? "etcds://" : "etcd://") + endpoints();
    if (!prefix.empty()) out += "/" + std::string(prefix);
    return out;
}

pid_t etcd_cluster::pid(std::size_t i) const { return members_.at(i).pid; }

void etcd_cluster::spawn(std::size_t i) {
    auto& m = members_[i];
    std::string initial;
    for (std::size_t j = 0; j < members_.size(); ++j) {
        if (j > 0) initial += ',';
        initial += "m" + std::to_string(j + 1) + "=http://" + members_[j].address + ":" +
                   std::to_string(members_[j].peer_port);
    }
    const auto client =
        (secure_ ? "https://" : "http://") + m.address + ":" + std::to_string(m.client_port);
    const auto peer = "http://" + m.address + ":" + std::to_string(m.peer_port);
    std::vector<std::string> argv = m.wrapper;
    argv.insert(
        argv.end(),
        {etcd_binary, "--name=m" + std::to_string(i + 1), "--data-dir=" + m.dir + "/data",
         "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
         "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
         "--initial-cluster=" + initial, "--initial-cluster-token=" + token_,
         std::string("--initial-cluster-state=") + (m.started_once ? "existing" : "new"),
         // Elections within about a second (tests on loopback).
         "--heartbeat-interval=50", "--election-timeout=500", "--logger=zap", "--log-level=warn"});
    if (secure_) {
        argv.insert(argv.end(), {"--cert-file=" + tls_.cert, "--key-file=" + tls_.key,
                                 "--listen-metrics-urls=http://" + m.address + ":" +
                                     std::to_string(m.http_port)});
        if (tls_.client_cert_auth)
            argv.insert(argv.end(), {"--client-cert-auth", "--trusted-ca-file=" + tls_.ca});
    }
    const std::string log = m.dir + "/etcd.log";
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    try {
        m.pid = detail::spawn(argv.front(), argv, out);
    } catch (...) {
        if (out >= 0) ::close(out);
        throw;
    }
    if (out >= 0) ::close(out);
    m.started_once = true;
}

bool etcd_cluster::healthy(std::size_t i, std::chrono::milliseconds timeout) const {
    const auto& m = members_.at(i);
    const auto answer = http(m.address, m.http_port, "GET", "/health", "", timeout);
    return answer.find("\"health\":\"true\"") != std::string::npos;
}

void etcd_cluster::wait_healthy(std::size_t i) {
    const auto deadline = clock::now() + scaled(start_deadline);
    auto& m = members_[i];
    while (clock::now() < deadline) {
        int raw = 0;
        if (m.pid > 0 && detail::wait_for(m.pid, std::chrono::milliseconds(0), raw)) {
            m.pid = -1;
            throw std::runtime_error(
                "etcd_cluster: member " + std::to_string(i + 1) + " exited with status " +
                std::to_string(detail::decode_status(raw)) + "\n" + log_tails());
        }
        if (healthy(i, std::chrono::milliseconds(500))) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("etcd_cluster: member " + std::to_string(i + 1) +
                             " not healthy in time\n" + log_tails());
}

std::string etcd_cluster::log_tails() const {
    std::string out;
    for (std::size_t i = 0; i < members_.size(); ++i)
        out += "--- member " + std::to_string(i + 1) + "\n" +
               read_tail(members_[i].dir + "/etcd.log", 3000);
    return out;
}

void etcd_cluster::stop(std::size_t i) {
    detail::terminate(members_.at(i).pid, scaled(std::chrono::seconds(10)));
}

void etcd_cluster::kill9(std::size_t i) { detail::kill_now(members_.at(i).pid); }

void etcd_cluster::start(std::size_t i) {
    if (members_.at(i).pid > 0) return;
    spawn(i);
    wait_healthy(i);
}

void etcd_cluster::pause(std::size_t i) { ::kill(members_.at(i).pid, SIGSTOP); }
void etcd_cluster::resume(std::size_t i) { ::kill(members_.at(i).pid, SIGCONT); }

void etcd_cluster::pause_all() {
    for (std::size_t i = 0; i < members_.size(); ++i) {
        if (members_[i].pid > 0) pause(i);
    }
}

void etcd_cluster::resume_all() {
    for (std::size_t i = 0; i < members_.size(); ++i) {
        if (members_[i].pid > 0) resume(i);
    }
}

int etcd_cluster::leader() const {
    for (std::size_t i = 0; i < members_.size(); ++i) {
        if (members_[i].pid <= 0) continue;
        const auto answer = http(members_[i].address, members_[i].client_port, "POST",
                                 "/v3/maintenance/status", "{}", std::chrono::milliseconds(500));
        const auto leader = json_number(answer, "leader");
        const auto self = json_number(answer, "member_id");
        if (!leader.empty() && leader != "0" && leader == self) return static_cast<int>(i);
    }
    return -1;
}

void etcd_cluster::move_leader(std::size_t i) {
    const auto& m = members_.at(i);
    const auto status = http(m.address, m.client_port, "POST", "/v3/maintenance/status", "{}",
                             scaled(std::chrono::seconds(2)));
    const auto id = json_number(status, "member_id");
    if (id.empty()) throw std::runtime_error("etcd_cluster::move_leader: member has no status");
    std::ostringstream hex;
    hex << std::hex << std::stoull(id);
    const auto deadline = clock::now() + scaled(std::chrono::seconds(20));
    while (clock::now() < deadline) {
        if (leader() == static_cast<int>(i)) return;
        etcdctl({"move-leader", hex.str()});
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("etcd_cluster::move_leader: member " + std::to_string(i + 1) +
                             " does not lead\n" + log_tails());
}

namespace {

std::string base64(const std::string& in) {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                           (static_cast<unsigned char>(in[i + 1]) << 8) |
                           static_cast<unsigned char>(in[i + 2]);
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += alphabet[v & 63];
    }
    if (i + 1 == in.size()) {
        const unsigned v = static_cast<unsigned char>(in[i]) << 16;
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                           (static_cast<unsigned char>(in[i + 1]) << 8);
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

}  // namespace

std::size_t etcd_cluster::count(const std::string& prefix) const {
    if (secure_) throw std::runtime_error("etcd_cluster::count: not in TLS mode (use etcdctl)");
    std::string end = prefix;
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
    if (end.empty()) {
        end = std::string(1, '\0');
    } else {
        end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
    }
    const std::string body = "{\"key\":\"" + base64(prefix) + "\",\"range_end\":\"" + base64(end) +
                             "\",\"count_only\":true}";
    const auto deadline = clock::now() + scaled(std::chrono::seconds(10));
    while (clock::now() < deadline) {
        for (const auto& m : members_) {
            if (m.pid <= 0) continue;
            const auto answer = http(m.address, m.client_port, "POST", "/v3/kv/range", body,
                                     std::chrono::milliseconds(1000));
            if (answer.find("\"header\"") == std::string::npos) continue;
            const auto n = json_number(answer, "count");
            return n.empty() ? 0 : static_cast<std::size_t>(std::stoull(n));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("etcd_cluster::count: no member answered");
}

std::string etcd_cluster::metrics_text(std::size_t i, std::string_view must_have,
                                       const char* who) const {
    const auto deadline = clock::now() + scaled(std::chrono::seconds(10));
    while (clock::now() < deadline) {
        auto answer = http(members_.at(i).address, members_.at(i).http_port, "GET", "/metrics", "",
                           std::chrono::milliseconds(2000));
        if (answer.find(must_have) != std::string::npos) return answer;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error(std::string("etcd_cluster::") + who + ": member " +
                             std::to_string(i + 1) + " did not serve /metrics with " +
                             std::string(must_have));
}

std::uint64_t etcd_cluster::grpc_started(std::size_t i, std::string_view method) const {
    // grpc_server_started_total{grpc_method="M",grpc_service="...",grpc_type="..."} N
    std::istringstream in(metrics_text(i, "grpc_server_started_total", "grpc_started"));
    const std::string label = "grpc_method=\"" + std::string(method) + "\"";
    std::uint64_t total = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("grpc_server_started_total{", 0) != 0 ||
            line.find(label) == std::string::npos)
            continue;
        total += std::stoull(line.substr(line.rfind(' ') + 1));
    }
    return total;
}

double etcd_cluster::metric(std::size_t i, std::string_view name) const {
    const std::string line_start = "\n" + std::string(name) + " ";
    const auto text = metrics_text(i, line_start, "metric");
    const auto at = text.find(line_start) + line_start.size();
    return std::stod(text.substr(at, text.find('\n', at) - at));
}

std::vector<std::string> etcd_cluster::etcdctl_argv(const std::vector<std::string>& args) const {
    std::string list = endpoints();
    if (secure_) {
        list.clear();
        for (std::size_t i = 0; i < members_.size(); ++i)
            list += (i > 0 ? ",https://" : "https://") + endpoint(i);
    }
    std::vector<std::string> argv = {etcdctl_binary, "--endpoints=" + list};
    if (!root_.empty()) argv.push_back("--user=" + root_);
    if (secure_) {
        argv.push_back("--cacert=" + tls_.ca);
        if (!tls_.client_cert.empty())
            argv.insert(argv.end(), {"--cert=" + tls_.client_cert, "--key=" + tls_.client_key});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
}

etcdctl_result etcd_cluster::etcdctl(const std::vector<std::string>& args,
                                     std::chrono::milliseconds timeout) const {
    const std::string out_path = dir_ + "/etcdctl.out";
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) throw std::runtime_error("etcdctl: cannot open " + out_path);
    const auto argv = etcdctl_argv(args);
    pid_t pid = -1;
    try {
        pid = detail::spawn(argv.front(), argv, out);
    } catch (...) {
        ::close(out);
        throw;
    }
    ::close(out);
    int raw = 0;
    if (!detail::wait_for(pid, scaled(timeout), raw)) {
        ::kill(pid, SIGKILL);
        raw = detail::wait_blocking(pid);
    }
    return {detail::decode_status(raw), read_tail(out_path, 3000)};
}

void etcd_cluster::enable_auth(const std::string& root_password) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"user", "add", "root:" + root_password}, {"auth", "enable"}}) {
        const auto r = etcdctl(args);
        if (r.status != 0)
            throw std::runtime_error("etcd_cluster::enable_auth: etcdctl " + args[0] + " " +
                                     args[1] + " failed: " + r.out);
    }
    root_ = "root:" + root_password;
}

etcd_cluster& shared_etcd() {
    static std::once_flag once;
    static std::unique_ptr<etcd_cluster> cluster;
    std::call_once(once, [] {
        cluster = std::make_unique<etcd_cluster>(1);
        // Killed at exit even when a test calls exit(): the destructor of a static unique_ptr
        // runs then too.
    });
    return *cluster;
}

dlock::etcd::client shared_etcd_client(std::chrono::milliseconds ttl) {
    return dlock::etcd::client({.url = shared_etcd().url(),
                                .session_ttl = ttl,
                                .connect_timeout = scaled(std::chrono::seconds(10))});
}

}  // namespace dlock::test
