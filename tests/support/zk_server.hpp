// Private Debian ZooKeeper servers for tests (docs/zookeeper.md): a standalone server or an
// ensemble of N on free 127.0.0.1 ports, each in its own temp dir, started as children of the test
// process with `java ... ZooKeeperServerMain|QuorumPeerMain` (the JVM directly) and always torn
// down. Readiness is the `srvr` four-letter word printing a `Mode:` line. Fault tests use
// stop/start/kill9 on single servers. Use one object from one thread at a time;
// children() and mode() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <string_view>
#include <vector>

#include "redis_tap.hpp"

namespace dlock::test {

struct zk_ensemble_options {
    /// Sessions are clamped to [2, 20] ticks.
    std::chrono::milliseconds tick{250};
    /// Per server (empty: every one on "127.0.0.1"): the IPv4 address its client, quorum and
    /// election ports bind to. Ports are picked free on 127.0.0.1 of the calling thread's
    /// namespace.
    std::vector<std::string> addresses;
    /// Per server (empty: none): an argv prefix its JVM runs under, e.g.
    /// veth_netns::exec_prefix() to run it in another network namespace (netns.hpp).
    std::vector<std::vector<std::string>> wrappers;
    /// forceSync: true fsyncs every write to the transaction log before it is acknowledged
    /// (ZooKeeper's default, what a benchmark should measure); false (tests) is faster and may
    /// lose acknowledged writes on a machine crash, which no test provokes.
    bool force_sync = false;
};

class zk_ensemble {
public:
    /// Starts `servers` servers (1 = standalone) with tickTime `tick` (sessions are clamped to
    /// [2, 20] ticks) and waits until every one serves (deadline scaled(30s)). Throws
    /// std::runtime_error with the log tails if they do not.
    explicit zk_ensemble(std::size_t servers = 1,
                         std::chrono::milliseconds tick = std::chrono::milliseconds(250));
    zk_ensemble(std::size_t servers, zk_ensemble_options options);
    /// SIGKILL + waitpid every server, remove the temp dir. Never throws.
    ~zk_ensemble();
    zk_ensemble(const zk_ensemble&) = delete;
    zk_ensemble& operator=(const zk_ensemble&) = delete;

    std::size_t size() const { return servers_.size(); }
    /// "127.0.0.1:p1,127.0.0.1:p2,..." (each server's address:client port)
    std::string hosts() const;
    /// "address:client port" of server i.
    std::string host(std::size_t i) const;
    /// "zk://<hosts><base>"
    std::string url(std::string_view base = "/dlock") const;
    std::uint16_t client_port(std::size_t i) const;
    pid_t pid(std::size_t i) const;
    /// Server i's directory: zoo.cfg, data/ and its log zk.log.
    const std::string& dir(std::size_t i) const;

    /// SIGTERM (+SIGCONT) and waitpid; SIGKILL after scaled(10s).
    void stop(std::size_t i);
    void kill9(std::size_t i);
    /// Starts server i again (same ports and data) and waits until it serves (scaled(30s)).
    void start(std::size_t i);

    /// The `Mode:` of server i ("standalone", "leader", "follower"), or "" if it does not answer.
    std::string mode(std::size_t i) const;
    /// The last 3,000 bytes of each server's log, for a failing test's message.
    std::string log_tails() const;
    /// How many sessions server i holds a watch on node `path` for (the `wchp` four-letter
    /// word); 0 when none, or when the server does not answer.
    std::size_t watchers(const std::string& path, std::size_t i = 0) const;
    /// The requests server i has received since it started (`srvr`'s "Received:"), from every
    /// session; 0 when it does not answer.
    std::uint64_t requests_received(std::size_t i = 0) const;
    /// The children of `path` (sorted), read with a fresh ZooKeeper session; empty if the node
    /// does not exist. Throws std::runtime_error if no server answers within scaled(10s).
    std::vector<std::string> children(const std::string& path) const;
    /// Deletes node `path` (any version) with a fresh session, as an administrator would; false
    /// if it does not exist. Throws std::runtime_error if no server answers within scaled(10s).
    bool remove(const std::string& path) const;
    /// Sets node `path`'s data (any version) with a fresh session, as an administrator would;
    /// false if it does not exist. Throws std::runtime_error if no server answers within
    /// scaled(10s).
    bool set_data(const std::string& path, const std::string& data) const;
    /// In ONE transaction (a multi), sets node `path`'s data and deletes it: a watcher of the
    /// node hears only the change, and finds the node gone when it sets its watch again. false
    /// if it does not exist. Throws std::runtime_error if no server answers within scaled(10s).
    bool set_and_remove(const std::string& path) const;

private:
    struct server {
        std::uint16_t client_port = 0, quorum_port = 0, election_port = 0;
        std::string address = "127.0.0.1";
        std::vector<std::string> wrapper;
        std::string dir;
        pid_t pid = -1;
    };
    void write_config(std::size_t i);
    void spawn(std::size_t i);
    void wait_serving(std::size_t i);
    /// Runs `op(zh)` on a fresh session until it returns true or scaled(10s) passes.
    template <class Op>
    bool with_admin_session(const char* what, const std::string& path, Op op) const;

    std::chrono::milliseconds tick_;
    bool force_sync_ = false;
    std::string dir_;
    std::vector<server> servers_;
};

/// A TCP proxy on a free 127.0.0.1 port in front of one ZooKeeper server, for clients that
/// should lose their connection at a chosen request: drop_next(op) makes the proxy close the
/// connection of the next client that sends a request of type `op` (ZOO_SETDATA_OP, ... from
/// <zookeeper/proto.h>) instead of forwarding it, so the server never sees it and the client
/// gets ZCONNECTIONLOSS; the client's reconnection then goes through as usual. Everything else
/// is forwarded as is. drop_reply_next(op) forwards the next request of type `op` (so the server
/// carries it out) and closes that connection when its reply comes, instead of forwarding the
/// reply: the client gets ZCONNECTIONLOSS for a request that took effect. cut(true) cuts the
/// path: nothing is forwarded either way and new connections are accepted but never answered, as
/// by a frozen server, while the server itself runs on (and expires the sessions it no longer
/// hears from); cut(false) lets what was held back through. Throws std::runtime_error if it
/// cannot listen.
class zk_proxy {
public:
    /// In front of the server at 127.0.0.1:`upstream_port`.
    explicit zk_proxy(std::uint16_t upstream_port);

    /// "127.0.0.1:<port>"
    std::string host() const;
    void drop_next(int op);
    void drop_reply_next(int op);
    /// How many requests (or replies) were dropped so far.
    int dropped() const;
    /// How many requests of type `op` clients sent through the proxy so far (dropped or not).
    int requests(int op) const;
    void cut(bool on);

private:
    void serve(int client, int server);

    mutable std::mutex mutex_;     // guards drop_op_, drop_reply_op_, dropped_, requests_
    std::map<int, int> requests_;  // op -> count
    int drop_op_ = -1;
    int drop_reply_op_ = -1;
    int dropped_ = 0;
    std::atomic<bool> cut_{false};
    tap_detail::relay relay_;  // last: its threads are joined before the state they use goes
};

/// The binary's shared standalone server: started on first use (thread-safe), killed and its dir
/// removed at exit. Tests must not stop or pause it; use a private zk_ensemble for that.
zk_ensemble& shared_zk();

}  // namespace dlock::test
