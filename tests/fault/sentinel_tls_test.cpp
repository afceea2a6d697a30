// rediss-sentinel:// against a Sentinel set that speaks TLS only to its clients and among itself
// (sentinel_set with a tls_dir: replication and the sentinels' links over TLS, certificates from
// tls_certs): locking through the sentinels and the master over TLS, a failover followed over TLS,
// the CLI with --tls-ca, and a sentinel whose CA is not trusted refused with the cause named
// (docs/sentinel.md, docs/tls.md). One set per binary.
#include <dlock/connect.hpp>
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <string>

#include "cli_process.hpp"
#include "sentinel_set.hpp"
#include "test_env.hpp"
#include "tls_certs.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::unique_name;

dlock::test::sentinel_set& tls_set() {
    static dlock::test::sentinel_set set(dlock::test::shared_tls_certs().dir());
    return set;
}

dlock::redis::client_options options(const std::string& url, dlock::tls_options tls = {}) {
    return {.url = url, .command_timeout = scaled(500ms), .tls = std::move(tls)};
}

TEST(SentinelTls, LocksThroughTheSentinelsAndTheMasterOverTls) {
    auto& set = tls_set();
    // The CA from the URL's query, as rediss:// takes it.
    dlock::redis::client by_query(
        options(set.url("tls_ca=" + dlock::test::shared_tls_certs().ca())));
    const auto name = unique_name();
    auto grant = by_query.acquire(name, {.lease = scaled(5s)});
    EXPECT_EQ(set.master().command({"EXISTS", by_query.lock_key(name)}), "1");
    grant.release();
    EXPECT_EQ(set.master().command({"EXISTS", by_query.lock_key(name)}), "0");

    // The CA from client_options::tls, and through connect().
    dlock::redis::client by_options(
        options(set.url(), {.ca_file = dlock::test::shared_tls_certs().ca()}));
    auto again = by_options.acquire(name, {.lease = scaled(5s)});
    again.release();
    auto backend = dlock::connect(
        set.url(), {.tls = dlock::tls_options{.ca_file = dlock::test::shared_tls_certs().ca()}});
    dlock::mutex m(*backend, name, {.lease = scaled(5s)});
    m.lock();
    m.unlock();

    // The CLI with --tls-ca.
    namespace status = dlock::test::exit_status;
    auto run = dlock::test::run_cli({"run", "--url", set.url(), "--tls-ca",
                                     dlock::test::shared_tls_certs().ca(), name, "--", "true"});
    EXPECT_EQ(run.status, status::ok) << run.err;
}

TEST(SentinelTls, AFailoverIsFollowedOverTls) {
    auto& set = tls_set();
    set.ensure_healthy();
    dlock::redis::client redis(options(set.url("tls_ca=" + dlock::test::shared_tls_certs().ca())));
    const auto name = unique_name();
    auto held = redis.acquire(name, {.lease = scaled(10s)});
    const auto old = set.master_index();
    set.sentinel(0).command({"SENTINEL", "FAILOVER", std::string(set.master_name)});
    const auto promoted = set.await_failover(old, 20s);
    // Until the old master is demoted it may still take a write (the documented hazard); then
    // the client's locks land on the promoted master, reached over TLS.
    int k = 0;
    EXPECT_TRUE(eventually(
        [&] {
            const auto next = name + "/" + std::to_string(++k);
            std::error_code ec;
            auto other = redis.acquire(next, {.lease = scaled(5s), .wait = scaled(1s)}, ec);
            return other && set.node(promoted).command({"EXISTS", redis.lock_key(next)}) == "1";
        },
        20s))
        << "no lock landed on the promoted master";
}

TEST(SentinelTls, ASentinelFromAnUnknownCaIsRefusedNamingTheCause) {
    auto& set = tls_set();
    // other-ca.pem did not sign the sentinels' (or the master's) certificate.
    dlock::redis::client stranger(options(set.url(
        "failover_wait=200ms&tls_ca=" + dlock::test::shared_tls_certs().dir() + "/other-ca.pem")));
    std::error_code ec;
    auto none = stranger.acquire(unique_name(), {.wait = 0s}, ec);
    EXPECT_FALSE(none);
    EXPECT_EQ(ec, dlock::errc::connection_failed);
    const auto what = dlock::last_error_message();
    EXPECT_NE(what.find("certificate verify failed: unknown CA"), std::string::npos) << what;
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(set.sentinel(0).tls_port())),
              std::string::npos)
        << what;
}

// A sentinel that stops answering is named with the last answer it gave, not only with the
// timeout: a discovery asks every sentinel again until its deadline, and on a loaded machine the
// last round's attempt, cut short by that deadline, used to replace the cause every full attempt
// had reported (the refusal above then read "connect timed out").
TEST(SentinelTls, ASentinelThatStopsAnsweringIsNamedWithTheLastAnswerItGave) {
    auto& set = tls_set();
    dlock::redis::client stranger(options(set.url(
        "failover_wait=200ms&tls_ca=" + dlock::test::shared_tls_certs().dir() + "/other-ca.pem")));
    std::error_code ec;
    EXPECT_FALSE(stranger.acquire(unique_name(), {.wait = 0s}, ec));
    const auto refused = dlock::last_error_message();
    ASSERT_NE(refused.find("certificate verify failed: unknown CA"), std::string::npos) << refused;

    set.sentinel(0).pause();  // keeps its sockets; the TLS handshake gets no answer
    EXPECT_FALSE(stranger.acquire(unique_name(), {.wait = 0s}, ec));
    const auto what = dlock::last_error_message();
    set.sentinel(0).resume();
    EXPECT_EQ(ec, dlock::errc::connection_failed);
    const auto named = what.find("127.0.0.1:" + std::to_string(set.sentinel(0).tls_port()) +
                                 ": connect timed out (the last answer it gave: ");
    ASSERT_NE(named, std::string::npos) << what;
    EXPECT_NE(what.find("certificate verify failed: unknown CA", named), std::string::npos) << what;
}

}  // namespace
