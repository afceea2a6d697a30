// A Redis Sentinel set for tests: one master and two replicas (redis_server) plus three sentinels
// (quorum 2, down-after-milliseconds 1000, so a killed master is replaced in about 2-3 s), all on
// free 127.0.0.1 ports. shared_sentinels() starts one per test binary; fault tests kill its master
// and call ensure_healthy() at the start of the next test, which brings the dead node back as a
// replica and waits (by conditions, with deadlines) until the sentinels see a master with two
// linked replicas again. Use from one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "redis_server.hpp"

namespace dlock::test {

class sentinel_set {
public:
    static constexpr std::string_view master_name = "mymaster";

    /// Starts the data nodes, waits for both replica links, then the sentinels, and waits until
    /// every sentinel knows the other two and both replicas. Throws std::runtime_error naming
    /// what never became ready.
    sentinel_set() : sentinel_set(std::string()) {}
    /// With a tls_certs directory (`tls_dir`): every node and sentinel also serves TLS
    /// (redis_server_options::tls_dir), replication and the sentinels' own links use it
    /// (`tls-replication yes`), so the sentinels name the master by its TLS port; url() is then
    /// rediss-sentinel:// with the sentinels' TLS ports. The plain ports stay for the fixture's
    /// own commands (node(i).command()).
    explicit sentinel_set(const std::string& tls_dir);
    ~sentinel_set();
    sentinel_set(const sentinel_set&) = delete;
    sentinel_set& operator=(const sentinel_set&) = delete;

    /// "redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster" plus `query` (without
    /// the '?') when not empty; rediss-sentinel:// and the TLS ports with a tls_dir.
    std::string url(std::string_view query = "") const;

    /// The data node the sentinels name as master now (index into node()).
    std::size_t master_index() const;
    redis_server& node(std::size_t i) { return *nodes_.at(i); }
    redis_server& sentinel(std::size_t i) { return *sentinels_.at(i); }
    redis_server& master() { return node(master_index()); }

    /// SIGKILLs the current master; returns its index.
    std::size_t kill_master();
    /// Waits until the sentinels name a master other than node `old` whose ROLE says master
    /// (deadline scaled(`timeout`)); returns its index. Throws std::runtime_error on timeout.
    std::size_t await_failover(std::size_t old, std::chrono::milliseconds timeout);
    /// Cuts both replicas off the master (they cannot authenticate when they reconnect), so
    /// writes from now on reach the master only; restore_replication() undoes it.
    void cut_replication();
    void restore_replication();
    /// Restarts dead nodes as replicas of the current master, restores replication, and waits
    /// until the set is healthy (deadline scaled(`timeout`)). Throws std::runtime_error if not.
    void ensure_healthy(std::chrono::milliseconds timeout = std::chrono::seconds(30));
    /// One master, both replicas linked to it, every sentinel seeing both as healthy replicas.
    bool healthy() const;
    /// For a failure message: each data node's port and replication state (role, link,
    /// connected replicas), what the first sentinel names as master, and the tail of its log
    /// (the failover's events: +sdown, +switch-master, +slave-reconf-*, +fix-slave-config).
    std::string describe() const;

private:
    /// The port the sentinels know node `i` by (its TLS port with a tls_dir).
    std::uint16_t data_port(std::size_t i) const;

    std::string tls_dir_;
    std::vector<std::unique_ptr<redis_server>> nodes_;
    std::vector<std::unique_ptr<redis_server>> sentinels_;
};

/// The binary's shared set, started on first use and torn down at exit.
sentinel_set& shared_sentinels();

}  // namespace dlock::test
