#include "netns.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "spawn.hpp"

namespace dlock::test {

namespace {

constexpr const char* ip_path = "/usr/sbin/ip";
constexpr const char* iptables_path = "/usr/sbin/iptables";
constexpr const char* restore_path = "/usr/sbin/iptables-restore";

std::string joined(const std::vector<std::string>& argv) {
    std::string out;
    for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
    return out;
}

// Runs argv; its exit status, with stdout+stderr in `output`.
int run_capture(const std::vector<std::string>& argv, std::string& output) {
    const int fd = ::memfd_create("dlock-cmd", MFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    int status = -1;
    try {
        const pid_t pid = detail::spawn(argv.at(0), argv, fd);
        status = detail::decode_status(detail::wait_blocking(pid));
    } catch (...) {
        ::close(fd);
        throw;
    }
    output.clear();
    char buf[4096];
    ::lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) output.append(buf, n);
    ::close(fd);
    return status;
}

// The rules of a cut as one iptables-restore transaction: they take effect together.
std::string cut_rules(const std::vector<std::uint16_t>& ports) {
    std::string rules = "*filter\n";
    for (const auto p : ports) {
        rules += "-A INPUT -p tcp --dport " + std::to_string(p) + " -j ACCEPT\n";
        rules += "-A OUTPUT -p tcp --sport " + std::to_string(p) + " -j ACCEPT\n";
    }
    return rules + "-A INPUT -p tcp -j DROP\n-A OUTPUT -p tcp -j DROP\nCOMMIT\n";
}

}  // namespace

void run_command(const std::vector<std::string>& argv) {
    std::string output;
    const int status = run_capture(argv, output);
    if (status != 0) {
        // Appended, not "`" + string: that prepend makes GCC 12 at -O3 report a false -Wrestrict.
        std::string what = "`";
        what += joined(argv);
        what += "` exited " + std::to_string(status) + ": " + output;
        throw std::runtime_error(what);
    }
}

std::string netns_unavailable() {
    static std::once_flag once;
    static std::string why;
    std::call_once(once, [] {
        if (::geteuid() != 0) {
            why = "network namespaces need root";
            return;
        }
        for (const char* tool : {ip_path, iptables_path, restore_path}) {
            if (::access(tool, X_OK) != 0) {
                why = std::string(tool) + " is missing (scripts/setup.sh installs it)";
                return;
            }
        }
        try {
            private_netns probe;
            run_command({iptables_path, "-w", "-L", "INPUT", "-n"});
        } catch (const std::exception& e) {
            why = std::string("cannot create a network namespace here: ") + e.what();
        }
    });
    return why;
}

private_netns::private_netns() {
    previous_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (previous_ < 0) throw std::runtime_error(std::string("open netns: ") + std::strerror(errno));
    if (::unshare(CLONE_NEWNET) != 0) {
        const int err = errno;
        ::close(previous_);
        throw std::runtime_error(std::string("unshare(CLONE_NEWNET): ") + std::strerror(err));
    }
    try {
        run_command({ip_path, "link", "set", "lo", "up"});
    } catch (...) {
        ::setns(previous_, CLONE_NEWNET);
        ::close(previous_);
        throw;
    }
}

private_netns::~private_netns() {
    ::setns(previous_, CLONE_NEWNET);
    ::close(previous_);
}

veth_netns::veth_netns(const std::string& outer_cidr, const std::string& inner_cidr) {
    static std::atomic<int> counter{0};
    const auto n = std::to_string(counter++);
    name_ = "dlk" + std::to_string(::getpid()) + "-" + n;
    // Interface names are per namespace; the pid keeps ours unique even in the host's.
    outer_if_ = "dv" + std::to_string(::getpid()) + "-" + n;
    const std::string inner_if = "dw" + std::to_string(::getpid()) + "-" + n;
    run_command({ip_path, "netns", "add", name_});
    try {
        run_command({ip_path, "link", "add", outer_if_, "type", "veth", "peer", "name", inner_if,
                     "netns", name_});
        run_command({ip_path, "addr", "add", outer_cidr, "dev", outer_if_});
        run_command({ip_path, "link", "set", outer_if_, "up"});
        run_command({ip_path, "-n", name_, "addr", "add", inner_cidr, "dev", inner_if});
        run_command({ip_path, "-n", name_, "link", "set", inner_if, "up"});
        run_command({ip_path, "-n", name_, "link", "set", "lo", "up"});
    } catch (...) {
        std::string ignored;
        run_capture({ip_path, "link", "del", outer_if_}, ignored);
        run_capture({ip_path, "netns", "del", name_}, ignored);
        throw;
    }
}

veth_netns::~veth_netns() {
    disarm();
    std::string ignored;
    try {
        // Deleting the namespace destroys its veth end (and so the pair) and its rules.
        run_capture({ip_path, "link", "del", outer_if_}, ignored);
        run_capture({ip_path, "netns", "del", name_}, ignored);
    } catch (...) {
    }
}

std::vector<std::string> veth_netns::exec_prefix() const {
    return {ip_path, "netns", "exec", name_};
}

void veth_netns::arm_cut(const std::vector<std::uint16_t>& ports) {
    disarm();
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    // iptables-restore reads the rules now and commits them when it reads COMMIT.
    const std::vector<std::string> argv = {ip_path,      "netns", "exec",     name_,
                                           restore_path, "-w",    "--noflush"};
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int err = errno;
        ::close(fds[0]);
        ::close(fds[1]);
        if (devnull >= 0) ::close(devnull);
        throw std::runtime_error(std::string("fork: ") + std::strerror(err));
    }
    if (pid == 0) {
        ::dup2(fds[0], STDIN_FILENO);
        if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
        ::close_range(3, ~0U, 0);
        ::execv(ip_path, cargv.data());
        ::_exit(127);
    }
    ::close(fds[0]);
    if (devnull >= 0) ::close(devnull);
    armed_fd_ = fds[1];
    armed_pid_ = pid;
    armed_ports_ = ports;
    auto rules = cut_rules(ports);
    rules.resize(rules.size() - std::string("COMMIT\n").size());
    if (::write(armed_fd_, rules.data(), rules.size()) != static_cast<ssize_t>(rules.size())) {
        disarm();
        throw std::runtime_error("veth_netns::arm_cut: cannot write the rules");
    }
}

void veth_netns::cut_tcp_except(const std::vector<std::uint16_t>& ports) {
    if (armed_fd_ < 0 || armed_ports_ != ports) {
        heal();
        arm_cut(ports);
    }
    const std::string commit = "COMMIT\n";
    const bool sent =
        ::write(armed_fd_, commit.data(), commit.size()) == static_cast<ssize_t>(commit.size());
    ::close(armed_fd_);
    armed_fd_ = -1;
    const int status = detail::decode_status(detail::wait_blocking(armed_pid_));
    armed_pid_ = -1;
    if (!sent || status != 0) {
        throw std::runtime_error("veth_netns: iptables-restore in " + name_ + " exited " +
                                 std::to_string(status));
    }
}

void veth_netns::disarm() noexcept {
    if (armed_fd_ >= 0) ::close(armed_fd_);  // EOF without COMMIT: nothing is applied
    armed_fd_ = -1;
    if (armed_pid_ > 0) detail::wait_blocking(armed_pid_);
    armed_pid_ = -1;
}

void veth_netns::heal() {
    disarm();
    for (const char* chain : {"INPUT", "OUTPUT"})
        run_command({ip_path, "netns", "exec", name_, iptables_path, "-w", "-F", chain});
}

}  // namespace dlock::test
