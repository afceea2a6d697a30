#include "child_process.hpp"

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "spawn.hpp"
#include "test_env.hpp"

namespace dlock::test {

namespace {
struct role_registry {
    std::mutex mutex;
    std::map<std::string, child_fn> roles;  // guarded by mutex
};
role_registry& registry() {
    static role_registry r;  // function-local: safe to use from other static initializers
    return r;
}
}  // namespace

bool register_child(std::string name, child_fn fn) {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    if (!r.roles.emplace(name, std::move(fn)).second) {
        std::fprintf(stderr, "dlock::test::register_child: role \"%s\" registered twice\n",
                     name.c_str());
        std::abort();
    }
    return true;
}

int run_child_role(const std::string& role, const std::vector<std::string>& args) {
    child_fn fn;
    {
        auto& r = registry();
        std::lock_guard lock(r.mutex);
        const auto it = r.roles.find(role);
        if (it == r.roles.end()) {
            std::fprintf(stderr, "dlock test child: unknown role \"%s\"\n", role.c_str());
            return 99;
        }
        fn = it->second;
    }
    try {
        return fn(args);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dlock test child \"%s\" threw: %s\n", role.c_str(), e.what());
    } catch (...) {
        std::fprintf(stderr, "dlock test child \"%s\" threw a non-std exception\n", role.c_str());
    }
    return 98;
}

child_process::child_process(std::string role, std::vector<std::string> args)
    : role_(std::move(role)) {
    std::vector<std::string> argv;
    argv.reserve(args.size() + 2);
    argv.emplace_back(program_invocation_name);
    argv.push_back("--dlock-child=" + role_);
    for (auto& a : args) argv.push_back(std::move(a));
    std::fflush(stdout);  // keep our buffered output ahead of the child's
    std::fflush(stderr);
    pid_ = detail::spawn("/proc/self/exe", argv, -1);
}

child_process::~child_process() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        detail::wait_blocking(pid_);
    }
}

pid_t child_process::pid() const { return pid_; }

void child_process::kill9() { stop_signal(SIGKILL); }

void child_process::stop_signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
}

int child_process::wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return status_;
    int raw = 0;
    if (!detail::wait_for(pid_, scaled(timeout), raw)) {
        const pid_t pid = pid_;
        ::kill(pid_, SIGKILL);
        status_ = detail::decode_status(detail::wait_blocking(pid_));
        pid_ = -1;
        throw std::runtime_error("child_process \"" + role_ + "\" (pid " + std::to_string(pid) +
                                 ") still running after " +
                                 std::to_string(scaled(timeout).count()) + " ms; killed");
    }
    status_ = detail::decode_status(raw);
    pid_ = -1;
    return status_;
}

}  // namespace dlock::test
