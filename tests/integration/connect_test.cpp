// dlock::connect() against real servers: every URL form the CLI accepts reaches a working lock
// service (redis://, redlock:// over three servers, zk://), and a password given apart from the
// URL (connect_options::password) authenticates.
#include <dlock/connect.hpp>
#include <dlock/dlock.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "redis_fleet.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif

namespace {

using namespace std::chrono_literals;

// Takes `name` on `backend`, checks a second mutex cannot, releases, and takes it again.
void expect_exclusive(dlock::backend& backend, const std::string& name) {
    dlock::mutex a(backend, name, {.lease = 10s});
    dlock::mutex b(backend, name, {.lease = 10s});
    ASSERT_TRUE(a.try_lock());
    EXPECT_FALSE(b.try_lock());
    a.unlock();
    ASSERT_TRUE(b.try_lock_for(dlock::test::scaled(5s)));
    b.unlock();
}

TEST(ConnectIntegration, RedisUrl) {
    auto backend = dlock::connect(dlock::test::shared_redis().url());
    expect_exclusive(*backend, dlock::test::unique_name("connect"));
}

TEST(ConnectIntegration, RedlockUrlOverThreeServers) {
    dlock::test::redis_fleet fleet(3);
    std::string url = "redlock://";
    for (std::size_t i = 0; i < fleet.size(); ++i)
        url += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(fleet[i].port());
    auto backend = dlock::connect(url);
    const auto name = dlock::test::unique_name("connect");
    expect_exclusive(*backend, name);
    // The grant was on every server: the key prefix reached the Redlock client.
    dlock::mutex m(*backend, name, {.lease = 10s});
    ASSERT_TRUE(m.try_lock());
    for (std::size_t i = 0; i < fleet.size(); ++i)
        EXPECT_EQ(fleet[i].command({"EXISTS", "dlock:{" + name + "}"}), "1") << i;
    m.unlock();
}

TEST(ConnectIntegration, PasswordApartFromTheUrl) {
    dlock::test::redis_server server({.extra_args = {"--requirepass", "s3cr@t"}});
    auto backend = dlock::connect(server.url(), {.password = "s3cr@t"});
    expect_exclusive(*backend, dlock::test::unique_name("connect"));
    auto wrong = dlock::connect(server.url(), {.password = "wrong"});
    try {
        dlock::mutex m(*wrong, "x", {.lease = 10s});
        (void)m.try_lock();
        ADD_FAILURE() << "a wrong password was accepted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::auth_failed) << e.what();
        EXPECT_EQ(std::string(e.what()).find("wrong"), std::string::npos) << e.what();
    }
}

#if DLOCK_HAS_ZOOKEEPER
TEST(ConnectIntegration, ZooKeeperUrl) {
    auto backend = dlock::connect(dlock::test::shared_zk().url("/dlock-connect"));
    expect_exclusive(*backend, dlock::test::unique_name("connect"));
}
#endif

}  // namespace
