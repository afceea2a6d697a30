#include "sentinel_set.hpp"

#include <algorithm>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "test_env.hpp"

namespace dlock::test {

namespace {

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

/// The value after `field` in a flattened field/value list, or empty.
std::string field_of(const std::vector<std::string>& lines, std::size_t from, std::size_t to,
                     std::string_view field) {
    for (std::size_t i = from; i + 1 < to; i += 2) {
        if (lines[i] == field) return lines[i + 1];
    }
    return {};
}

std::string ask(const redis_server& s, const std::vector<std::string>& args) {
    try {
        return s.command(args, std::chrono::milliseconds(500));
    } catch (const std::exception&) {
        return {};
    }
}

}  // namespace

sentinel_set::sentinel_set(const std::string& tls_dir) : tls_dir_(tls_dir) {
    const auto options = [&](std::vector<std::string> args) {
        args.insert(args.begin(), {"--repl-diskless-sync-delay", "0"});
        if (!tls_dir_.empty()) args.insert(args.end(), {"--tls-replication", "yes"});
        return redis_server_options{.extra_args = std::move(args), .tls_dir = tls_dir_};
    };
    nodes_.push_back(std::make_unique<redis_server>(options({})));
    const auto master_port = std::to_string(data_port(0));
    for (int i = 0; i < 2; ++i) {
        nodes_.push_back(
            std::make_unique<redis_server>(options({"--replicaof", "127.0.0.1", master_port})));
    }
    // Sentinels learn replicas from INFO every 10 s: start them once both links are up.
    if (!eventually(
            [&] {
                const auto info = ask(*nodes_.front(), {"INFO", "replication"});
                return info.find("connected_slaves:2") != std::string::npos &&
                       info.find("slave1:") != std::string::npos &&
                       info.find("state=online") != std::string::npos;
            },
            std::chrono::seconds(20))) {
        throw std::runtime_error("sentinel_set: the replicas never linked to the master");
    }
    const std::string name(master_name);
    const std::string config = "sentinel monitor " + name + " 127.0.0.1 " + master_port +
                               " 2\n"
                               "sentinel down-after-milliseconds " +
                               name +
                               " 1000\n"
                               "sentinel failover-timeout " +
                               name + " 2000\n" + (tls_dir_.empty() ? "" : "tls-replication yes\n");
    for (int i = 0; i < 3; ++i) {
        redis_server_options o;
        o.sentinel_config = config;
        o.tls_dir = tls_dir_;
        sentinels_.push_back(std::make_unique<redis_server>(std::move(o)));
    }
    if (!eventually([&] { return healthy(); }, std::chrono::seconds(30)))
        throw std::runtime_error("sentinel_set: the sentinels never saw the whole set");
}

sentinel_set::~sentinel_set() = default;

std::string sentinel_set::url(std::string_view query) const {
    std::string out = tls_dir_.empty() ? "redis-sentinel://" : "rediss-sentinel://";
    for (std::size_t i = 0; i < sentinels_.size(); ++i) {
        out += (i ? ",127.0.0.1:" : "127.0.0.1:") +
               std::to_string(tls_dir_.empty() ? sentinels_[i]->port() : sentinels_[i]->tls_port());
    }
    out += "/" + std::string(master_name);
    if (!query.empty()) out += "?" + std::string(query);
    return out;
}

std::size_t sentinel_set::master_index() const {
    for (const auto& s : sentinels_) {
        const auto l =
            lines_of(ask(*s, {"SENTINEL", "get-master-addr-by-name", std::string(master_name)}));
        if (l.size() != 2) continue;
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            if (std::to_string(data_port(i)) == l[1]) return i;
        }
    }
    throw std::runtime_error("sentinel_set: no sentinel names a master");
}

std::size_t sentinel_set::kill_master() {
    const auto m = master_index();
    nodes_[m]->kill9();
    return m;
}

std::size_t sentinel_set::await_failover(std::size_t old, std::chrono::milliseconds timeout) {
    std::size_t found = old;
    const bool done = eventually(
        [&] {
            try {
                found = master_index();
            } catch (const std::exception&) {
                return false;
            }
            return found != old && nodes_[found]->running() &&
                   ask(*nodes_[found], {"ROLE"}).starts_with("master");
        },
        timeout);
    if (!done) throw std::runtime_error("sentinel_set: no failover within the deadline");
    return found;
}

void sentinel_set::cut_replication() {
    const auto m = master_index();
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (i != m && nodes_[i]->running())
            nodes_[i]->command({"CONFIG", "SET", "masterauth", "dlock-test-cut"});
    }
    nodes_[m]->command({"CLIENT", "KILL", "TYPE", "replica"});
    if (!eventually(
            [&] {
                return ask(*nodes_[m], {"INFO", "replication"}).find("connected_slaves:0") !=
                       std::string::npos;
            },
            std::chrono::seconds(5)))
        throw std::runtime_error("sentinel_set: the replicas stayed linked");
}

void sentinel_set::restore_replication() {
    for (auto& n : nodes_) {
        if (n->running()) ask(*n, {"CONFIG", "SET", "masterauth", ""});
    }
}

void sentinel_set::ensure_healthy(std::chrono::milliseconds timeout) {
    restore_replication();
    const auto port = std::to_string(data_port(master_index()));
    for (auto& n : nodes_) {
        if (n->running()) continue;
        n->start();
        n->command({"REPLICAOF", "127.0.0.1", port});
    }
    if (!eventually([&] { return healthy(); }, timeout))
        throw std::runtime_error("sentinel_set: the set did not become healthy again");
}

bool sentinel_set::healthy() const {
    std::size_t m = 0;
    try {
        m = master_index();
    } catch (const std::exception&) {
        return false;
    }
    if (!nodes_[m]->running() || !ask(*nodes_[m], {"ROLE"}).starts_with("master")) return false;
    const auto info = ask(*nodes_[m], {"INFO", "replication"});
    if (info.find("connected_slaves:2") == std::string::npos) return false;
    const std::string name(master_name);
    for (const auto& s : sentinels_) {
        const auto named = lines_of(ask(*s, {"SENTINEL", "get-master-addr-by-name", name}));
        if (named.size() != 2 || named[1] != std::to_string(data_port(m))) return false;
        const auto master = lines_of(ask(*s, {"SENTINEL", "master", name}));
        if (field_of(master, 0, master.size(), "flags") != "master" ||
            field_of(master, 0, master.size(), "num-other-sentinels") != "2")
            return false;
        // Flattened list of replicas, each a field/value list starting with "name".
        const auto replicas = lines_of(ask(*s, {"SENTINEL", "replicas", name}));
        std::vector<std::size_t> starts;
        for (std::size_t i = 0; i < replicas.size(); i += 2) {
            if (replicas[i] == "name") starts.push_back(i);
        }
        starts.push_back(replicas.size());
        std::size_t ok = 0;
        for (std::size_t r = 0; r + 1 < starts.size(); ++r) {
            if (field_of(replicas, starts[r], starts[r + 1], "flags") == "slave" &&
                field_of(replicas, starts[r], starts[r + 1], "master-link-status") == "ok")
                ++ok;
        }
        if (ok != 2) return false;
    }
    return true;
}

std::string sentinel_set::describe() const {
    std::string out;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        out += "node " + std::to_string(i) + " :" + std::to_string(data_port(i));
        if (!nodes_[i]->running()) {
            out += " down\n";
            continue;
        }
        for (const auto& line : lines_of(ask(*nodes_[i], {"INFO", "replication"}))) {
            if (line.starts_with("role:") || line.starts_with("master_port:") ||
                line.starts_with("master_link_status:") || line.starts_with("connected_slaves:") ||
                line.starts_with("slave0:") || line.starts_with("slave1:") ||
                line.starts_with("master_repl_offset:"))
                out += " " + line.substr(0, line.find_last_not_of('\r') + 1);
        }
        out += "\n";
    }
    if (!sentinels_.empty()) {
        auto named = ask(*sentinels_.front(),
                         {"SENTINEL", "get-master-addr-by-name", std::string(master_name)});
        std::replace(named.begin(), named.end(), '\n', ':');
        out += "sentinel 0 names " + named + "\nsentinel 0 log:\n" + sentinels_.front()->log_tail();
    }
    return out;
}

std::uint16_t sentinel_set::data_port(std::size_t i) const {
    return tls_dir_.empty() ? nodes_.at(i)->port() : nodes_.at(i)->tls_port();
}

sentinel_set& shared_sentinels() {
    static std::mutex mutex;
    static std::unique_ptr<sentinel_set> set;
    std::lock_guard lock(mutex);
    if (!set) set = std::make_unique<sentinel_set>();
    return *set;
}

}  // namespace dlock::test
