// Self-test of tests/support: the private redis-server lifecycle, timing helpers and child roles.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <memory>
#include <stdexcept>
#include <thread>

#include "child_process.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"

using namespace std::chrono_literals;
namespace dt = dlock::test;

namespace {

const bool exit7_registered = dt::register_child("exit7", [](const auto&) { return 7; });
const bool args_registered = dt::register_child("check_args", [](const auto& args) {
    return args == std::vector<std::string>{"a", "b c", ""} ? 0 : 1;
});
const bool sleeper_registered = dt::register_child("sleeper", [](const auto&) {
    std::this_thread::sleep_for(60s);
    return 0;
});

// A read error (here EISDIR; ESRCH for a /proc file of a process that exited while it was read,
// which the CLI supervision tests scan) gives what was read, never an exception.
TEST(Harness, ReadTextOfAFileThatCannotBeReadIsEmpty) {
    const dlock::test::temp_dir dir("dlock-harness");
    std::string text = "unset";
    EXPECT_NO_THROW(text = dlock::test::read_text(dir.path()));
    EXPECT_EQ(text, "");
    EXPECT_EQ(dlock::test::read_text(dir / "missing"), "");
    EXPECT_EQ(dlock::test::read_text(dir.write("f", "abc")), "abc");
}

TEST(Harness, StartsAndAnswersCommands) {
    dt::redis_server server;
    ASSERT_TRUE(server.running());
    EXPECT_GT(server.pid(), 0);
    EXPECT_EQ(server.url(), "redis://127.0.0.1:" + std::to_string(server.port()));
    EXPECT_EQ(server.command({"PING"}), "PONG");
    EXPECT_EQ(server.command({"SET", "k", "v w"}), "OK");
    EXPECT_EQ(server.command({"GET", "k"}), "v w");
    EXPECT_EQ(server.command({"GET", "missing"}), "(nil)");
    EXPECT_EQ(server.command({"INCR", "n"}), "1");
    EXPECT_EQ(server.command({"RPUSH", "l", "x", "y"}), "2");
    EXPECT_EQ(server.command({"LRANGE", "l", "0", "-1"}), "x\ny");
    EXPECT_EQ(server.command({"NOSUCHCOMMAND"}).rfind("ERR ", 0), 0u);
    EXPECT_EQ(server.command({"DEBUG", "SLEEP", "0"}), "OK");  // --enable-debug-command local
    EXPECT_EQ(server.command({"CONFIG", "GET", "save"}), "save\n");
    EXPECT_EQ(server.command({"CONFIG", "GET", "appendonly"}), "appendonly\nno");
}

TEST(Harness, DestructorKillsServerAndRemovesDir) {
    pid_t pid = -1;
    std::string dir;
    std::uint16_t port = 0;
    {
        dt::redis_server server;
        pid = server.pid();
        dir = server.dir();
        port = server.port();
        EXPECT_EQ(::access(dir.c_str(), F_OK), 0);
    }
    EXPECT_NE(::kill(pid, 0), 0);  // reaped by waitpid, so the pid is gone (not a zombie)
    EXPECT_NE(::access(dir.c_str(), F_OK), 0);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    EXPECT_NE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
}

TEST(Harness, StopThenStartOnSamePort) {
    dt::redis_server server;
    const auto port = server.port();
    ASSERT_EQ(server.command({"SET", "k", "v"}), "OK");
    server.stop();
    EXPECT_FALSE(server.running());
    EXPECT_EQ(server.pid(), -1);
    EXPECT_THROW(server.command({"PING"}), std::runtime_error);
    server.start();
    EXPECT_TRUE(server.running());
    EXPECT_EQ(server.port(), port);
    EXPECT_EQ(server.command({"PING"}), "PONG");
    EXPECT_EQ(server.command({"GET", "k"}), "(nil)");  // --save '' and no AOF: nothing kept
}

TEST(Harness, Kill9ThenStartReplaysAppendOnlyFile) {
    dt::redis_server server({.appendonly = true});
    ASSERT_EQ(server.command({"SET", "durable", "yes"}), "OK");
    const pid_t first = server.pid();
    server.kill9();
    EXPECT_FALSE(server.running());
    EXPECT_THROW(server.command({"PING"}), std::runtime_error);
    server.start();
    EXPECT_NE(server.pid(), first);
    EXPECT_EQ(server.command({"GET", "durable"}), "yes");  // appendfsync always
}

TEST(Harness, PausedServerTimesOutThenAnswersAfterResume) {
    dt::redis_server server;
    server.pause();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(server.command({"PING"}, 200ms), std::runtime_error);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
    server.resume();
    EXPECT_EQ(server.command({"PING"}, 1000ms), "PONG");
    server.pause();
    server.stop();  // SIGTERM must work on a paused server too
    EXPECT_FALSE(server.running());
}

TEST(Harness, RequirepassIsUsedByCommand) {
    dt::redis_server server({.extra_args = {"--requirepass", "s3cret"}});
    EXPECT_EQ(server.command({"PING"}), "PONG");
    EXPECT_EQ(server.command({"CONFIG", "GET", "requirepass"}), "requirepass\ns3cret");
    server.kill9();
    server.start();
    EXPECT_EQ(server.command({"PING"}), "PONG");
}

TEST(Harness, SharedRedisIsOnePerBinary) {
    dt::redis_server& a = dt::shared_redis();
    dt::redis_server& b = dt::shared_redis();
    EXPECT_EQ(&a, &b);
    const std::string key = dt::unique_name("k");
    EXPECT_EQ(a.command({"SET", key, "1"}), "OK");
    EXPECT_EQ(b.command({"GET", key}), "1");
}

TEST(Harness, EventuallyWaitsForTrueAndGivesUpAtDeadline) {
    std::atomic<int> calls{0};
    EXPECT_TRUE(dt::eventually([&] { return ++calls >= 3; }, 1s));
    EXPECT_EQ(calls.load(), 3);

    std::atomic<bool> flag{false};
    std::jthread setter([&] {
        std::this_thread::sleep_for(30ms);
        flag = true;
    });
    EXPECT_TRUE(dt::eventually([&] { return flag.load(); }, 5s));

    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(dt::eventually([] { return false; }, 50ms));
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, dt::scaled(50ms));
    EXPECT_LT(took, dt::scaled(50ms) + 1s);
}

TEST(Harness, ScaledAndUniqueNames) {
    EXPECT_GT(dt::time_scale(), 0.0);
    EXPECT_EQ(dt::scaled(1000ms).count(), std::llround(1000 * dt::time_scale()));
    const std::string a = dt::unique_name("x");
    const std::string b = dt::unique_name("x");
    EXPECT_NE(a, b);
    EXPECT_EQ(a.rfind("Harness.ScaledAndUniqueNames/x/", 0), 0u) << a;
    EXPECT_NE(dt::unique_name().find("/" + std::to_string(::getpid()) + "."), std::string::npos);
    EXPECT_GT(dt::free_port(), 0);
}

// A server whose port another process bound first is started again on new ports; any other
// failure is not retried (the ZooKeeper and etcd harnesses start through this).
TEST(Harness, StartOnFreePortsRetriesOnlyATakenPort) {
    int starts = 0, clean_ups = 0;
    bool taken = true;
    const auto fail_twice = [&] {
        if (++starts <= 2) throw std::runtime_error("bind: address already in use");
    };
    dt::start_on_free_ports(
        fail_twice, [&] { return taken; }, [&] { ++clean_ups; });
    EXPECT_EQ(starts, 3);
    EXPECT_EQ(clean_ups, 2);

    starts = clean_ups = 0;
    taken = false;
    EXPECT_THROW(dt::start_on_free_ports(
                     fail_twice, [&] { return taken; }, [&] { ++clean_ups; }),
                 std::runtime_error);
    EXPECT_EQ(starts, 1) << "a failure that is not a taken port is not retried";
    EXPECT_EQ(clean_ups, 1);

    starts = clean_ups = 0;
    taken = true;
    const auto always = [&] {
        ++starts;
        throw std::runtime_error("bind: address already in use");
    };
    EXPECT_THROW(dt::start_on_free_ports(
                     always, [&] { return taken; }, [&] { ++clean_ups; }, 3),
                 std::runtime_error);
    EXPECT_EQ(starts, 3);
    EXPECT_EQ(clean_ups, 3);
}

TEST(Harness, ChildRoleExitCodeAndArgs) {
    dt::child_process seven("exit7", {});
    EXPECT_GT(seven.pid(), 0);
    EXPECT_EQ(seven.wait(10s), 7);
    EXPECT_EQ(seven.pid(), -1);
    EXPECT_EQ(seven.wait(10s), 7);  // cached

    dt::child_process args("check_args", {"a", "b c", ""});
    EXPECT_EQ(args.wait(10s), 0);

    dt::child_process unknown("no_such_role", {});
    EXPECT_EQ(unknown.wait(10s), 99);
}

TEST(Harness, SpawnsWhileOtherThreadsRun) {
    // dlock clients run a background thread; fork + exec must work (and be TSan-clean) then.
    std::atomic<bool> done{false};
    std::jthread busy([&] {
        while (!done) std::this_thread::sleep_for(1ms);
    });
    dt::child_process seven("exit7", {});
    dt::redis_server server;
    EXPECT_EQ(server.command({"PING"}), "PONG");
    EXPECT_EQ(seven.wait(10s), 7);
    done = true;
}

TEST(Harness, ServerStartedFromAnotherThreadOutlivesIt) {
    // PR_SET_PDEATHSIG fires when the forking *thread* exits; it is only used from the main thread.
    std::unique_ptr<dt::redis_server> server;
    std::jthread([&] { server = std::make_unique<dt::redis_server>(); }).join();
    EXPECT_EQ(server->command({"PING"}), "PONG");
    server->kill9();
    std::jthread([&] { server->start(); }).join();
    EXPECT_EQ(server->command({"PING"}), "PONG");
}

TEST(Harness, ChildKilledBySigkillReports137) {
    dt::child_process sleeper("sleeper", {});
    sleeper.stop_signal(SIGSTOP);
    sleeper.stop_signal(SIGCONT);
    sleeper.kill9();
    EXPECT_EQ(sleeper.wait(10s), 128 + SIGKILL);
}

TEST(Harness, ChildWaitTimesOutAndKills) {
    dt::child_process sleeper("sleeper", {});
    const pid_t pid = sleeper.pid();
    EXPECT_THROW(sleeper.wait(100ms), std::runtime_error);
    EXPECT_EQ(sleeper.pid(), -1);
    EXPECT_NE(::kill(pid, 0), 0);  // killed and reaped
}

}  // namespace
