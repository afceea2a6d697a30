// Network partitions for tests, with Linux network namespaces and iptables (needs root, iproute2
// and iptables; scripts/setup.sh installs them). Nothing here touches an interface, address,
// route or rule of the host's own namespace:
//
//   private_netns  the calling THREAD enters a fresh, empty network namespace (loopback up);
//                  every process and thread it starts from then on is born there too. Servers
//                  and clients of one test live in it; it vanishes with the last of them.
//   veth_netns     inside that, a second (named) namespace joined to it by a veth pair, for the
//                  one server a test wants to cut off; cut_tcp_except() black-holes its TCP
//                  traffic (iptables DROP inside that namespace) except on the ports named.
//
// Typical use (a ZooKeeper follower cut off from its leader while its clients still reach it):
//   dlock::test::private_netns net;                          // everything below lives in it
//   dlock::test::veth_netns f("10.77.0.1/24", "10.77.0.2/24");
//   dlock::test::zk_ensemble zk(3, {.addresses = {"10.77.0.2", "10.77.0.1", "10.77.0.1"},
//                                   .wrappers = {f.exec_prefix(), {}, {}}});
//   f.cut_tcp_except({zk.client_port(0)});  ...  f.heal();
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlock::test {

/// Why network namespaces cannot be used here ("" if they can): not root, `ip` or `iptables`
/// missing, or the kernel refuses a new namespace. Checked once (it creates and drops one).
std::string netns_unavailable();

/// Runs `argv` (argv[0] an absolute path) in the calling thread's namespace and waits; throws
/// std::runtime_error with the command and its output if it does not exit 0.
void run_command(const std::vector<std::string>& argv);

/// The calling thread moves into a new, private network namespace (unshare(CLONE_NEWNET)) with
/// its loopback up; the destructor moves it back. Use on one thread; what the thread starts
/// inside (processes, threads, sockets) stays inside. Throws std::runtime_error on failure.
class private_netns {
public:
    private_netns();
    ~private_netns();
    private_netns(const private_netns&) = delete;
    private_netns& operator=(const private_netns&) = delete;

private:
    int previous_ = -1;  // fd of the thread's namespace before
};

/// A named namespace "dlk<pid>-<n>" joined to the calling thread's namespace by a veth pair:
/// `outer_cidr` (e.g. "10.77.0.1/24") on our end, `inner_cidr` on its end; both ends and its
/// loopback up. Create it inside a private_netns, so the host's namespace gets nothing. The
/// destructor deletes the namespace, which takes its veth pair and its iptables rules with it.
/// Throws std::runtime_error on failure (after undoing what was done).
class veth_netns {
public:
    veth_netns(const std::string& outer_cidr, const std::string& inner_cidr);
    ~veth_netns();
    veth_netns(const veth_netns&) = delete;
    veth_netns& operator=(const veth_netns&) = delete;

    const std::string& name() const { return name_; }
    /// The argv prefix that runs a program inside: {"/usr/sbin/ip", "netns", "exec", name}.
    std::vector<std::string> exec_prefix() const;
    /// Black-holes (iptables DROP, no reset) every TCP packet in or out of the namespace except
    /// those to or from local `ports`: its servers stay reachable on those ports and nothing
    /// else gets through. The rules take effect together (one iptables-restore transaction).
    /// Replaces an earlier cut. If arm_cut(ports) ran before, the cut takes effect within about
    /// a millisecond of the call (the process that commits it is already running).
    void cut_tcp_except(const std::vector<std::uint16_t>& ports);
    /// Starts the process that will commit cut_tcp_except(ports), so that the cut itself is
    /// fast enough to land between two packets a test aims at.
    void arm_cut(const std::vector<std::uint16_t>& ports);
    /// Removes the rules cut_tcp_except() added (and a pending arm_cut()).
    void heal();

private:
    void disarm() noexcept;

    std::string name_;
    std::string outer_if_;
    std::vector<std::uint16_t> armed_ports_;
    int armed_fd_ = -1;  // write end of the armed process's stdin
    int armed_pid_ = -1;
};

}  // namespace dlock::test
