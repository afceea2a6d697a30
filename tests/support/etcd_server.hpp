// Private Debian etcd servers for tests (docs/etcd.md): a single member or a cluster of N on free
// 127.0.0.1 ports (or on addresses of network namespaces a test made, netns.hpp), each in its own
// temp dir, started as children of the test process
// (/usr/bin/etcd) and always torn down. Readiness is every member's /health answering
// {"health":"true"}. Fault tests use stop/start/kill9/pause/resume on single members, and
// etcdctl() to act as an administrator (or as etcdctl's own lock users). Use one object from one
// thread at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/etcd/client.hpp>

namespace dlock::test {

struct etcdctl_result {
    int status = -1;  ///< exit code, 128 + signal if killed
    std::string out;  ///< stdout and stderr
};

/// TLS on the members' client ports (etcds://), e.g. with shared_tls_certs(): the server
/// certificate must name 127.0.0.1 (an IP SAN). /health and /metrics are then served over plain
/// HTTP on a port of their own (--listen-metrics-urls).
struct etcd_tls {
    std::string ca, cert, key;      ///< the CA the clients trust, the server certificate and key
    bool client_cert_auth = false;  ///< --client-cert-auth: clients need a certificate
    std::string client_cert, client_key;  ///< what etcdctl() presents then
};

struct etcd_cluster_options {
    /// Per member (empty: every one on "127.0.0.1"): the IPv4 address its client and peer ports
    /// bind to. Ports are picked free on 127.0.0.1 of the calling thread's namespace.
    std::vector<std::string> addresses{};
    /// Per member (empty: none): an argv prefix it runs under, e.g. veth_netns::exec_prefix()
    /// to run it in another network namespace (netns.hpp).
    std::vector<std::vector<std::string>> wrappers{};
    /// TLS on the members' client ports (etcds://); off when tls.cert is empty.
    etcd_tls tls{};
    /// The members' data on /dev/shm where there is one (tests: a disk kept busy by a build
    /// beside them stalls etcd's fsyncs for seconds); false: under /tmp, on disk, fsynced as in
    /// production (the benchmarks' member, dlock-test-server etcd).
    bool data_in_memory = true;
};

class etcd_cluster {
public:
    /// Starts `members` members (1 = a single node) and waits until every one is healthy
    /// (deadline scaled(30s)). Throws std::runtime_error with the log tails if they are not.
    explicit etcd_cluster(std::size_t members = 1);
    /// The same with `options`: member addresses and wrappers, TLS (etcds://; count() is not
    /// available then).
    etcd_cluster(std::size_t members, etcd_cluster_options options);
    /// SIGKILL + waitpid every member, remove the temp dir. Never throws.
    ~etcd_cluster();
    etcd_cluster(const etcd_cluster&) = delete;
    etcd_cluster& operator=(const etcd_cluster&) = delete;

    std::size_t size() const { return members_.size(); }
    /// "127.0.0.1:p1,127.0.0.1:p2,..." (each member's client address)
    std::string endpoints() const;
    /// "<address>:<client port>" of member i.
    std::string endpoint(std::size_t i) const;
    std::uint16_t client_port(std::size_t i) const { return members_.at(i).client_port; }
    /// "etcd://<endpoints>" (etcds:// in TLS mode) plus "/<prefix>" when given.
    std::string url(std::string_view prefix = "") const;
    pid_t pid(std::size_t i) const;

    /// SIGTERM (+SIGCONT) and waitpid; SIGKILL after scaled(10s).
    void stop(std::size_t i);
    void kill9(std::size_t i);
    /// Starts member i again (same ports and data) and waits until it is healthy (scaled(30s)).
    void start(std::size_t i);
    void pause(std::size_t i);   ///< SIGSTOP
    void resume(std::size_t i);  ///< SIGCONT
    void pause_all();
    void resume_all();
    /// Whether member i answers /health with {"health":"true"} (within `timeout`).
    bool healthy(std::size_t i, std::chrono::milliseconds timeout) const;
    /// The index of the member that is the leader, read from each member's status; -1 if none
    /// answers so.
    int leader() const;
    /// Hands the leadership to member i (`etcdctl move-leader`) and waits until it leads
    /// (scaled(20s)); throws std::runtime_error if it does not.
    void move_leader(std::size_t i);

    /// How many gRPC calls of `method` (e.g. "LeaseKeepAlive") member i has started since it
    /// (re)started: etcd's grpc_server_started_total counter from its /metrics. Throws
    /// std::runtime_error if the member does not answer within scaled(10s).
    std::uint64_t grpc_started(std::size_t i, std::string_view method) const;
    /// The value of the unlabelled metric `name` (e.g. etcd_debugging_mvcc_slow_watcher_total) on
    /// member i's /metrics. Throws std::runtime_error if the member does not answer within
    /// scaled(10s) or does not report it.
    double metric(std::size_t i, std::string_view name) const;

    /// How many keys start with `prefix` (a count-only range over the JSON gateway of the first
    /// running member). Throws std::runtime_error if no member answers within scaled(10s).
    std::size_t count(const std::string& prefix) const;

    /// Runs `etcdctl --endpoints=<endpoints> args...` (in TLS mode with https:// endpoints,
    /// --cacert and, with client_cert_auth, --cert/--key) and waits for it (at most `timeout`, then
    /// SIGKILL). Throws std::runtime_error if it cannot be started.
    etcdctl_result etcdctl(const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
    /// Turns etcd's authentication on: adds user root with `root_password` and enables auth;
    /// etcdctl() then runs as root (--user). Throws std::runtime_error if etcdctl fails.
    void enable_auth(const std::string& root_password);

    /// argv of `etcdctl --endpoints=<endpoints> args...` (for a child_process of one's own).
    std::vector<std::string> etcdctl_argv(const std::vector<std::string>& args) const;

private:
    /// Member i's /metrics once it contains `must_have` (scaled(10s)); `who` names the caller in
    /// the error.
    std::string metrics_text(std::size_t i, std::string_view must_have, const char* who) const;

    struct member {
        std::string address = "127.0.0.1";
        std::vector<std::string> wrapper;
        std::uint16_t client_port = 0, peer_port = 0;
        std::uint16_t http_port = 0;  // /health and /metrics: client_port, else the metrics port
        std::string dir;
        pid_t pid = -1;
        bool started_once = false;
    };
    void spawn(std::size_t i);
    void wait_healthy(std::size_t i);
    std::string log_tails() const;

    std::string dir_;
    std::string token_;
    etcd_tls tls_;
    bool secure_ = false;
    std::string root_;  // "root:<password>" once enable_auth() ran
    std::vector<member> members_;
};

/// The binary's shared single member: started on first use (thread-safe), killed and its dir
/// removed at exit. Tests must not stop or pause it; use a private etcd_cluster for that.
etcd_cluster& shared_etcd();

/// A dlock client of shared_etcd() whose session lease has `ttl`, granted within scaled(10s)
/// (a Raft write: the client's default 2 s was missed on a loaded 2-core CI machine).
dlock::etcd::client shared_etcd_client(std::chrono::milliseconds ttl = std::chrono::seconds(10));

}  // namespace dlock::test
