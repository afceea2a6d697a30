// `dlock` with rediss:// (docs/tls.md): --tls-ca, --tls-cert and --tls-key, and the refusal of an
// unverified server with its cause and the unreachable status.
#include <gtest/gtest.h>

#include <string>

#include "cli_process.hpp"
#include "redis_server.hpp"
#include "test_env.hpp"
#include "tls_certs.hpp"

namespace {

using dlock::test::run_cli;
using namespace dlock::test::exit_status;

TEST(CliTls, RunsAndReportsStatusOverTls) {
    const auto name = dlock::test::unique_name("cli-tls");
    const auto url = dlock::test::shared_tls_redis().tls_url();
    auto r = run_cli({"run", "--url", url, "--tls-ca", dlock::test::shared_tls_certs().ca(), name,
                      "--", "sh", "-c", "exit 7"});
    EXPECT_EQ(r.status, 7) << r.err;
    r = run_cli({"status", "--url", url, "--tls-ca", dlock::test::shared_tls_certs().ca(), name});
    EXPECT_EQ(r.status, not_held) << r.err;
    // Mutual TLS: a client certificate is sent when given.
    r = run_cli({"run", "--url", url, "--tls-ca", dlock::test::shared_tls_certs().ca(),
                 "--tls-cert", dlock::test::shared_tls_certs().cert("client"), "--tls-key",
                 dlock::test::shared_tls_certs().key("client"), name, "--", "true"});
    EXPECT_EQ(r.status, ok) << r.err;
    // The CA in the URL's query instead of the flag.
    r = run_cli({"run", "--url", url + "?tls_ca=" + dlock::test::shared_tls_certs().ca(), name,
                 "--", "true"});
    EXPECT_EQ(r.status, ok) << r.err;
    // Every command takes the TLS options: set-permits too.
    r = run_cli({"set-permits", "--url", url, "--tls-ca", dlock::test::shared_tls_certs().ca(),
                 dlock::test::unique_name("cli-tls-sem"), "2"});
    EXPECT_EQ(r.status, ok) << r.err;
}

TEST(CliTls, AnUnverifiedServerIsUnreachableWithItsCause) {
    const auto name = dlock::test::unique_name("cli-tls");
    // No --tls-ca: the system trust store does not know the test CA.
    auto r =
        run_cli({"run", "--url", dlock::test::shared_tls_redis().tls_url(), name, "--", "true"});
    EXPECT_EQ(r.status, unreachable) << r.err;
    EXPECT_NE(r.err.find("unknown CA"), std::string::npos) << r.err;
    r = run_cli({"run", "--url", dlock::test::shared_tls_redis().tls_url(), "--tls-insecure", name,
                 "--", "true"});
    EXPECT_EQ(r.status, ok) << r.err;
    r = run_cli({"run", "--url", dlock::test::shared_tls_redis().tls_url(), "--tls-cert",
                 dlock::test::shared_tls_certs().cert("client"), name, "--", "true"});
    EXPECT_EQ(r.status, usage) << r.err;
    EXPECT_NE(r.err.find("--tls-key"), std::string::npos) << r.err;
    r = run_cli({"run", "--url", dlock::test::shared_tls_redis().url(), "--tls-ca",
                 dlock::test::shared_tls_certs().ca(), name, "--", "true"});
    EXPECT_EQ(r.status, usage) << r.err;
    EXPECT_NE(r.err.find("rediss://"), std::string::npos) << r.err;
}

}  // namespace
