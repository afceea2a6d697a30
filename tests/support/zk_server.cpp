#include "zk_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "spawn.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"

namespace dlock::test {

namespace {

using clock = std::chrono::steady_clock;
constexpr auto start_deadline = std::chrono::seconds(30);
constexpr const char* class_path = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

// One four-letter word over a fresh socket; "" if the server does not answer within `timeout`.
std::string four_letter(const std::string& address, std::uint16_t port, const char* word,
                        std::chrono::milliseconds timeout) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return {};
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
        ::close(fd);
        return {};
    }
    addr.sin_port = htons(port);
    const auto deadline = clock::now() + timeout;
    const auto wait = [&](short events) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        return ::poll(&p, 1, static_cast<int>(left)) == 1;
    };
    std::string out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
        errno != EINPROGRESS) {
        ::close(fd);
        return {};
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (!wait(POLLOUT) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0 ||
        ::send(fd, word, std::strlen(word), MSG_NOSIGNAL) != static_cast<ssize_t>(4)) {
        ::close(fd);
        return {};
    }
    char buf[4096];
    while (wait(POLLIN)) {
        const auto n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

}  // namespace

zk_ensemble::zk_ensemble(std::size_t servers, std::chrono::milliseconds tick)
    : zk_ensemble(
          servers,
          zk_ensemble_options{.tick = tick, .addresses = {}, .wrappers = {}, .force_sync = false}) {
}

zk_ensemble::zk_ensemble(std::size_t servers, zk_ensemble_options options)
    : tick_(options.tick), force_sync_(options.force_sync) {
    char tmpl[] = "/tmp/dlock-zk.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
        throw std::runtime_error(std::string("zk_ensemble: mkdtemp: ") + std::strerror(errno));
    dir_ = tmpl;
    servers_.resize(servers);
    bool foreign = false;  // a port answered as another process's ZooKeeper
    const auto start = [&] {
        std::set<std::uint16_t> used;
        const auto fresh = [&] {
            for (;;) {
                const auto p = free_port();
                if (used.insert(p).second) return p;
            }
        };
        for (std::size_t i = 0; i < servers; ++i) {
            auto& s = servers_[i];
            s.client_port = fresh();
            s.quorum_port = fresh();
            s.election_port = fresh();
            if (i < options.addresses.size()) s.address = options.addresses[i];
            if (i < options.wrappers.size()) s.wrapper = options.wrappers[i];
            s.dir = dir_ + "/" + std::to_string(i + 1);
            std::filesystem::create_directories(s.dir + "/data");
        }
        for (std::size_t i = 0; i < servers; ++i) {
            write_config(i);
            spawn(i);
        }
        try {
            for (std::size_t i = 0; i < servers; ++i) wait_serving(i);
        } catch (const std::runtime_error& e) {
            foreign = std::string(e.what()).find("served by another process") != std::string::npos;
            throw;
        }
    };
    // Another process may bind a port between free_port() and the server's own bind.
    const auto port_taken = [&] {
        if (foreign) return true;
        for (const auto& s : servers_) {
            const auto log = read_tail(s.dir + "/zk.log", 64 * 1024);
            if (log.find("Address already in use") != std::string::npos) return true;
        }
        return false;
    };
    const auto clean_up = [&] {
        for (auto& s : servers_) {
            if (s.pid > 0) {
                ::kill(s.pid, SIGKILL);
                detail::wait_blocking(s.pid);
                s.pid = -1;
            }
            std::error_code ec;
            if (!s.dir.empty()) std::filesystem::remove_all(s.dir, ec);
        }
        foreign = false;
    };
    try {
        start_on_free_ports(start, port_taken, clean_up);
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        throw;
    }
}

zk_ensemble::~zk_ensemble() {
    for (auto& s : servers_) {
        if (s.pid > 0) {
            ::kill(s.pid, SIGKILL);
            detail::wait_blocking(s.pid);
            s.pid = -1;
        }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

void zk_ensemble::write_config(std::size_t i) {
    const auto& s = servers_[i];
    std::ofstream cfg(s.dir + "/zoo.cfg");
    cfg << "tickTime=" << tick_.count() << "\ninitLimit=10\nsyncLimit=5\n"
        << "dataDir=" << s.dir << "/data\nclientPort=" << s.client_port
        << "\nclientPortAddress=" << s.address << "\nadmin.enableServer=false\n"
        << "4lw.commands.whitelist=*\nforceSync=" << (force_sync_ ? "yes" : "no") << "\n";
    if (servers_.size() > 1) {
        std::ofstream(s.dir + "/data/myid") << (i + 1) << "\n";
        for (std::size_t j = 0; j < servers_.size(); ++j) {
            cfg << "server." << (j + 1) << "=" << servers_[j].address << ":"
                << servers_[j].quorum_port << ":" << servers_[j].election_port << "\n";
        }
    }
}

void zk_ensemble::spawn(std::size_t i) {
    auto& s = servers_[i];
    std::vector<std::string> argv = s.wrapper;
    const std::vector<std::string> java = {"/usr/bin/java",
                                           "-Xmx256m",
                                           "-XX:+UseSerialGC",
                                           "-XX:TieredStopAtLevel=1",
                                           "-cp",
                                           class_path,
                                           "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                                           "-Dzookeeper.admin.enableServer=false",
                                           servers_.size() > 1
                                               ? "org.apache.zookeeper.server.quorum.QuorumPeerMain"
                                               : "org.apache.zookeeper.server.ZooKeeperServerMain",
                                           s.dir + "/zoo.cfg"};
    argv.insert(argv.end(), java.begin(), java.end());
    const std::string log = s.dir + "/zk.log";
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    try {
        s.pid = detail::spawn(argv.front(), argv, out);
    } catch (...) {
        if (out >= 0) ::close(out);
        throw;
    }
    if (out >= 0) ::close(out);
}

void zk_ensemble::wait_serving(std::size_t i) {
    const auto deadline = clock::now() + scaled(start_deadline);
    auto& s = servers_[i];
    while (clock::now() < deadline) {
        int raw = 0;
        if (s.pid > 0 && detail::wait_for(s.pid, std::chrono::milliseconds(0), raw)) {
            s.pid = -1;
            throw std::runtime_error(
                "zk_ensemble: server " + std::to_string(i + 1) + " exited with status " +
                std::to_string(detail::decode_status(raw)) + "\n" + log_tails());
        }
        if (!mode(i).empty()) {
            // The answer must come from OUR server: while it was down (stop/start), another
            // process on this machine may have taken the port, and a foreign ZooKeeper would then
            // serve our clients. `conf` names the data dir.
            const auto conf =
                four_letter(s.address, s.client_port, "conf", std::chrono::milliseconds(500));
            if (conf.find(s.dir + "/data") != std::string::npos) return;
            // Only a configuration naming another data dir is foreign: a server that answered
            // `srvr` may have stopped serving since (an election after a freeze), and then
            // answers "not currently serving requests".
            if (conf.find("dataDir=") != std::string::npos) {
                throw std::runtime_error("zk_ensemble: port " + std::to_string(s.client_port) +
                                         " of server " + std::to_string(i + 1) +
                                         " is served by another process");
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error(
        "zk_ensemble: server " + std::to_string(i + 1) + " not serving after " +
        std::to_string(scaled(start_deadline).count()) + " ms\n" + log_tails());
}

std::string zk_ensemble::log_tails() const {
    std::string out;
    for (std::size_t i = 0; i < servers_.size(); ++i)
        out += "--- server " + std::to_string(i + 1) + " ---\n" +
               read_tail(servers_[i].dir + "/zk.log", 3000);
    return out;
}

std::string zk_ensemble::hosts() const {
    std::string out;
    for (const auto& s : servers_) {
        if (!out.empty()) out += ',';
        out += s.address + ":" + std::to_string(s.client_port);
    }
    return out;
}

std::string zk_ensemble::host(std::size_t i) const {
    return servers_.at(i).address + ":" + std::to_string(servers_.at(i).client_port);
}

std::string zk_ensemble::url(std::string_view base) const {
    return "zk://" + hosts() + std::string(base);
}

std::uint16_t zk_ensemble::client_port(std::size_t i) const { return servers_.at(i).client_port; }
pid_t zk_ensemble::pid(std::size_t i) const { return servers_.at(i).pid; }
const std::string& zk_ensemble::dir(std::size_t i) const { return servers_.at(i).dir; }

void zk_ensemble::stop(std::size_t i) {
    detail::terminate(servers_.at(i).pid, scaled(std::chrono::seconds(10)));
}

void zk_ensemble::kill9(std::size_t i) { detail::kill_now(servers_.at(i).pid); }

void zk_ensemble::start(std::size_t i) {
    if (servers_.at(i).pid > 0) return;
    spawn(i);
    wait_serving(i);
}

std::string zk_ensemble::mode(std::size_t i) const {
    const auto text = four_letter(servers_.at(i).address, servers_.at(i).client_port, "srvr",
                                  std::chrono::milliseconds(500));
    const auto at = text.find("Mode: ");
    if (at == std::string::npos) return {};
    const auto end = text.find('\n', at);
    return text.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
}

std::uint64_t zk_ensemble::requests_received(std::size_t i) const {
    const auto text = four_letter(servers_.at(i).address, servers_.at(i).client_port, "srvr",
                                  std::chrono::milliseconds(500));
    const auto at = text.find("Received: ");
    return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + 10, nullptr, 10);
}

std::size_t zk_ensemble::watchers(const std::string& path, std::size_t i) const {
    // "<path>\n\t0x<session>\n\t0x<session>\n<next path>\n...": the tab lines under our path.
    const auto text = four_letter(servers_.at(i).address, servers_.at(i).client_port, "wchp",
                                  std::chrono::milliseconds(500));
    std::size_t count = 0;
    bool ours = false;
    std::size_t begin = 0;
    while (begin < text.size()) {
        auto end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        const std::string_view line(text.data() + begin, end - begin);
        if (!line.empty() && line.front() == '\t') {
            if (ours) ++count;
        } else {
            ours = line == path;
        }
        begin = end + 1;
    }
    return count;
}

std::vector<std::string> zk_ensemble::children(const std::string& path) const {
    struct closer {
        void operator()(zhandle_t* zh) const { zookeeper_close(zh); }
    };
    const auto deadline = clock::now() + scaled(std::chrono::seconds(10));
    while (clock::now() < deadline) {
        std::unique_ptr<zhandle_t, closer> zh(
            zookeeper_init2(hosts().c_str(), nullptr, 4000, nullptr, nullptr, 0,
                            [](const char*) {}));  // the C client's INFO chatter
        if (!zh) throw std::runtime_error("zk_ensemble::children: zookeeper_init failed");
        while (clock::now() < deadline && zoo_state(zh.get()) != ZOO_CONNECTED_STATE)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        String_vector v{0, nullptr};
        const int rc = zoo_get_children(zh.get(), path.c_str(), 0, &v);
        if (rc == ZNONODE) return {};
        if (rc == ZOK) {
            std::vector<std::string> out(v.data, v.data + v.count);
            deallocate_String_vector(&v);
            std::sort(out.begin(), out.end());
            return out;
        }
    }
    throw std::runtime_error("zk_ensemble::children(" + path + "): no server answered");
}

template <class Op>
bool zk_ensemble::with_admin_session(const char* what, const std::string& path, Op op) const {
    struct closer {
        void operator()(zhandle_t* zh) const { zookeeper_close(zh); }
    };
    const auto deadline = clock::now() + scaled(std::chrono::seconds(10));
    while (clock::now() < deadline) {
        std::unique_ptr<zhandle_t, closer> zh(zookeeper_init2(
            hosts().c_str(), nullptr, 4000, nullptr, nullptr, 0, [](const char*) {}));
        if (!zh) throw std::runtime_error(std::string("zk_ensemble::") + what + ": init failed");
        while (clock::now() < deadline && zoo_state(zh.get()) != ZOO_CONNECTED_STATE)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        const int rc = op(zh.get());
        if (rc == ZOK) return true;
        if (rc == ZNONODE) return false;
    }
    throw std::runtime_error(std::string("zk_ensemble::") + what + "(" + path +
                             "): no server answered");
}

bool zk_ensemble::remove(const std::string& path) const {
    return with_admin_session("remove", path,
                              [&](zhandle_t* zh) { return zoo_delete(zh, path.c_str(), -1); });
}

bool zk_ensemble::set_data(const std::string& path, const std::string& data) const {
    return with_admin_session("set_data", path, [&](zhandle_t* zh) {
        return zoo_set(zh, path.c_str(), data.data(), static_cast<int>(data.size()), -1);
    });
}

bool zk_ensemble::set_and_remove(const std::string& path) const {
    return with_admin_session("set_and_remove", path, [&](zhandle_t* zh) {
        zoo_op_t ops[2];
        zoo_op_result_t results[2];
        zoo_set_op_init(&ops[0], path.c_str(), "changed", 7, -1, nullptr);
        zoo_delete_op_init(&ops[1], path.c_str(), -1);
        return zoo_multi(zh, 2, ops, results);
    });
}

zk_proxy::zk_proxy(std::uint16_t upstream_port)
    : relay_(upstream_port, [this](int client, int server) { serve(client, server); }) {}

std::string zk_proxy::host() const { return "127.0.0.1:" + std::to_string(relay_.port()); }

void zk_proxy::drop_next(int op) {
    std::lock_guard lock(mutex_);
    drop_op_ = op;
}

void zk_proxy::drop_reply_next(int op) {
    std::lock_guard lock(mutex_);
    drop_reply_op_ = op;
}

int zk_proxy::dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
}

int zk_proxy::requests(int op) const {
    std::lock_guard lock(mutex_);
    const auto it = requests_.find(op);
    return it == requests_.end() ? 0 : it->second;
}

void zk_proxy::cut(bool on) { cut_ = on; }

void zk_proxy::serve(int client, int server) {
    // Both ways in whole frames (4-byte big-endian length, then the body), so a request or a
    // reply can be dropped. Client to server, the first frame is the connect request (no request
    // header: xid, type); server to client, the connect response (no reply header: xid, ...).
    std::string pending, replies;
    bool first = true, first_reply = true;
    std::optional<std::uint32_t> doomed_xid;  // drop_reply_next: the reply that ends the link
    const auto word = [](const std::string& frames, std::size_t at) {
        const auto* b = reinterpret_cast<const unsigned char*>(frames.data()) + at;
        return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
               (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
    };
    char buf[16384];
    bool open = true;
    while (open && !relay_.stopping()) {
        if (cut_) {  // hold everything back, in the kernel's buffers
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            continue;
        }
        pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
        if (::poll(p, 2, 20) <= 0) continue;
        if (p[1].revents != 0) {
            const auto n = ::recv(server, buf, sizeof buf, 0);
            if (n <= 0) break;
            replies.append(buf, static_cast<std::size_t>(n));
            while (open && replies.size() >= 4) {
                const std::size_t len = word(replies, 0);
                if (replies.size() < 4 + len) break;
                if (!first_reply && len >= 4 && doomed_xid && word(replies, 4) == *doomed_xid) {
                    open = false;  // the request took effect; its reply never arrives
                    break;
                }
                first_reply = false;
                open = tap_detail::write_all(client, replies.data(), 4 + len);
                replies.erase(0, 4 + len);
            }
        }
        if (open && p[0].revents != 0) {
            const auto n = ::recv(client, buf, sizeof buf, 0);
            if (n <= 0) break;
            pending.append(buf, static_cast<std::size_t>(n));
            while (open && pending.size() >= 4) {
                const std::size_t len = word(pending, 0);
                if (pending.size() < 4 + len) break;
                if (!first && len >= 8) {
                    const int type = static_cast<int>(word(pending, 8));
                    std::lock_guard lock(mutex_);
                    ++requests_[type];
                    if (type == drop_op_) {
                        drop_op_ = -1;
                        ++dropped_;
                        open = false;
                        break;
                    }
                    if (type == drop_reply_op_) {
                        drop_reply_op_ = -1;
                        ++dropped_;
                        doomed_xid = word(pending, 4);
                    }
                }
                first = false;
                open = tap_detail::write_all(server, pending.data(), 4 + len);
                pending.erase(0, 4 + len);
            }
        }
    }
    ::close(client);
    ::close(server);
}

namespace {
struct shared_state {
    std::mutex mutex;
    std::unique_ptr<zk_ensemble> server;  // guarded by mutex
};
shared_state& state() {
    static shared_state s;
    return s;
}
}  // namespace

zk_ensemble& shared_zk() {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    if (!s.server) s.server = std::make_unique<zk_ensemble>();
    return *s.server;
}

}  // namespace dlock::test
