// main() of every dlock test binary (target dlock_test_main). With "--dlock-child=<role>" as the
// first argument it runs a child role registered with register_child() and exits with its result,
// without initialising gtest. Otherwise it runs the gtest suite and, after the last test, checks
// for leaks (etcd's leak check): the process has no more threads than it started with,
// and the shared redis server (if used) has no client connected but the check's own. Set
// DLOCK_TEST_LEAK_CHECK=0 to skip that check.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

int thread_count() {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] != '.') ++n;
        }
        ::closedir(d);
    }
    return n;
}

std::string connected_clients(dlock::test::redis_server& server) {
    const std::string info = server.command({"INFO", "clients"});
    const std::string key = "connected_clients:";
    const auto at = info.find(key);
    if (at == std::string::npos) return "?";
    const auto end = info.find_first_of("\r\n", at);
    return info.substr(at + key.size(), end - at - key.size());
}

std::string client_list(dlock::test::redis_server& server) {
    try {
        return server.command({"CLIENT", "LIST"});
    } catch (const std::exception& e) {
        return e.what();
    }
}

class leak_check : public testing::Environment {
public:
    void SetUp() override {
        // TSan starts a helper thread at the first pthread_create; start it now so it is part
        // of the baseline.
        std::thread([] {}).join();
        threads_at_start_ = thread_count();
    }
    void TearDown() override {
        using namespace std::chrono_literals;
        int threads = 0;
        const bool threads_ok = dlock::test::eventually(
            [&] { return (threads = thread_count()) <= threads_at_start_; }, 5s);
        EXPECT_TRUE(threads_ok) << "dlock leak check: " << threads
                                << " threads running after the last test, " << threads_at_start_
                                << " before the first";
        if (auto* server = dlock::test::detail::shared_redis_if_started()) {
            std::string clients;
            const bool clients_ok = dlock::test::eventually(
                [&] {
                    try {
                        clients = connected_clients(*server);  // counts its own connection
                    } catch (const std::exception& e) {
                        clients = e.what();
                    }
                    return clients == "1";
                },
                5s);
            EXPECT_TRUE(clients_ok)
                << "dlock leak check: shared redis still has connections after the last test: "
                   "connected_clients="
                << clients << " (expected 1, the check itself)\n"
                << client_list(*server);
        }
    }

private:
    int threads_at_start_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    constexpr std::string_view child_flag = "--dlock-child=";
    if (argc >= 2 && std::string_view(argv[1]).starts_with(child_flag)) {
        const std::string role(argv[1] + child_flag.size());
        const std::vector<std::string> args(argv + 2, argv + argc);
        return dlock::test::run_child_role(role, args);
    }
    testing::InitGoogleTest(&argc, argv);
    const char* leak_env = std::getenv("DLOCK_TEST_LEAK_CHECK");
    if (leak_env == nullptr || std::string_view(leak_env) != "0") {
        testing::AddGlobalTestEnvironment(new leak_check);  // gtest owns it
    }
    return RUN_ALL_TESTS();
}
