// etcds:// (docs/etcd.md): the etcd backend over TLS against private etcd members serving the
// shared test certificates: lock and unlock with the CA, an unknown CA and a wrong server name
// refused with their cause and the address, mutual TLS (a client certificate required), the
// insecure mode, and etcdctl over TLS on the same keys.
#include <dlock/connect.hpp>
#include <dlock/dlock.hpp>
#include <dlock/etcd/client.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "etcd_server.hpp"
#include "test_env.hpp"
#include "tls_certs.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;
using dlock::test::shared_tls_certs;

/// One member serving TLS with the shared certificates (no client certificate needed).
dlock::test::etcd_cluster& tls_etcd() {
    static dlock::test::etcd_cluster etcd(1, {.ca = shared_tls_certs().ca(),
                                              .cert = shared_tls_certs().cert("server"),
                                              .key = shared_tls_certs().key("server")});
    return etcd;
}

/// One member that also requires a client certificate signed by the CA.
dlock::test::etcd_cluster& mutual_etcd() {
    static dlock::test::etcd_cluster etcd(1, {.ca = shared_tls_certs().ca(),
                                              .cert = shared_tls_certs().cert("server"),
                                              .key = shared_tls_certs().key("server"),
                                              .client_cert_auth = true,
                                              .client_cert = shared_tls_certs().cert("client"),
                                              .client_key = shared_tls_certs().key("client")});
    return etcd;
}

/// The failure of one non-waiting acquire on `c` (and that it failed).
std::string refusal(dlock::etcd::client& c, std::error_code& ec) {
    auto l = c.acquire(dlock::test::unique_name("etcd-tls-refused"), {.wait = 0ms}, ec);
    EXPECT_FALSE(l);
    return dlock::last_error_message(ec);
}

TEST(EtcdTls, LockAndUnlockOverEtcdsWithTheCaAndEtcdctlSeesTheKey) {
    const auto name = dlock::test::unique_name("etcd-tls");
    // The CA in the URL's query, then in client_options::tls.
    for (const auto& options : {dlock::etcd::client_options{
                                    .url = tls_etcd().url() + "?tls_ca=" + shared_tls_certs().ca()},
                                dlock::etcd::client_options{.url = tls_etcd().url(),
                                .tls = {.ca_file = shared_tls_certs().ca()}}}) {
        dlock::etcd::client c(options);
        auto l = c.acquire(name, {.wait = scaled(5s)});
        EXPECT_EQ(l.state(), dlock::lock_state::held);
        // etcdctl --cacert reads the key dlock holds.
        const auto got = tls_etcd().etcdctl({"get", "--prefix", "--keys-only", name + "/"});
        EXPECT_EQ(got.status, 0) << got.out;
        EXPECT_NE(got.out.find(c.key_of(l)), std::string::npos) << got.out;
        l.release();
        auto free = tls_etcd().etcdctl({"lock", name, "--", "true"});
        EXPECT_EQ(free.status, 0) << free.out;
    }
}

TEST(EtcdTls, AnUnknownCaIsRefusedNamingTheCauseAndTheAddress) {
    dlock::etcd::client c({.url = tls_etcd().url(),
                           .connect_timeout = scaled(1s),
                           .tls = {.ca_file = shared_tls_certs().dir() + "/other-ca.pem"}});
    std::error_code ec;
    const auto message = refusal(c, ec);
    EXPECT_EQ(ec, dlock::errc::connection_failed) << message;
    EXPECT_NE(message.find(tls_etcd().endpoint(0)), std::string::npos) << message;
    EXPECT_NE(message.find("unknown CA"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(EtcdTls, AServerNameTheCertificateDoesNotCarryIsRefused) {
    dlock::etcd::client wrong(
        {.url = tls_etcd().url(),
         .connect_timeout = scaled(1s),
         .tls = {.ca_file = shared_tls_certs().ca(), .server_name = "elsewhere.example"}});
    std::error_code ec;
    const auto message = refusal(wrong, ec);
    EXPECT_EQ(ec, dlock::errc::connection_failed) << message;
    EXPECT_NE(message.find("hostname mismatch"), std::string::npos) << message;
    EXPECT_NE(message.find(tls_etcd().endpoint(0)), std::string::npos) << message;
    // The name the certificate does carry works.
    dlock::etcd::client right(
        {.url = tls_etcd().url() + "?tls_server_name=localhost&tls_ca=" + shared_tls_certs().ca()});
    auto l = right.acquire(dlock::test::unique_name("etcd-tls-name"), {.wait = scaled(5s)});
    EXPECT_EQ(l.state(), dlock::lock_state::held);
}

TEST(EtcdTls, AClientCertificateIsRequiredWhereTheServerAsksForOne) {
    dlock::etcd::client without({.url = mutual_etcd().url(),
                                 .connect_timeout = scaled(1s),
                                 .tls = {.ca_file = shared_tls_certs().ca()}});
    std::error_code ec;
    const auto message = refusal(without, ec);
    EXPECT_EQ(ec, dlock::errc::connection_failed) << message;
    EXPECT_NE(message.find("client certificate"), std::string::npos) << message;
    EXPECT_NE(message.find(mutual_etcd().endpoint(0)), std::string::npos) << message;
    dlock::etcd::client with({.url = mutual_etcd().url(),
                              .tls = {.ca_file = shared_tls_certs().ca(),
                                      .cert_file = shared_tls_certs().cert("client"),
                                      .key_file = shared_tls_certs().key("client")}});
    auto l = with.acquire(dlock::test::unique_name("etcd-mtls"), {.wait = scaled(5s)});
    EXPECT_EQ(l.state(), dlock::lock_state::held);
}

TEST(EtcdTls, InsecureSkipsVerification) {
    dlock::etcd::client c({.url = tls_etcd().url() + "?tls_insecure=1"});
    auto l = c.acquire(dlock::test::unique_name("etcd-tls-insecure"), {.wait = scaled(5s)});
    EXPECT_EQ(l.state(), dlock::lock_state::held);
}

TEST(EtcdTls, ConnectTakesEtcdsUrlsAndTlsOptions) {
    auto b = dlock::connect(tls_etcd().url(),
                            {.tls = dlock::tls_options{.ca_file = shared_tls_certs().ca()}});
    auto l = b->acquire(dlock::test::unique_name("etcd-tls-connect"), {.wait = scaled(5s)});
    EXPECT_GT(l.fencing_token(), 0u);
}

TEST(EtcdTls, BadTlsSettingsAreInvalidArguments) {
    const auto ca = shared_tls_certs().ca();
    for (const auto& options : {
             dlock::etcd::client_options{.url = "etcd://127.0.0.1:1", .tls = {.ca_file = ca}},
             dlock::etcd::client_options{.url = "etcd://127.0.0.1:1?tls_ca=" + ca},
             dlock::etcd::client_options{.url = "etcds://127.0.0.1:1?tls_ca_dir=/etc"},
             dlock::etcd::client_options{.url = "etcds://127.0.0.1:1", .tls = {.ca_dir = "/etc"}},
             dlock::etcd::client_options{.url = "etcds://127.0.0.1:1?tls_cert=" + ca},
             dlock::etcd::client_options{.url = "etcds://127.0.0.1:1?tls_ca=/nonexistent.pem"},
             dlock::etcd::client_options{.url = "etcds://127.0.0.1:1?tls_insecure=maybe"},
         }) {
        try {
            dlock::etcd::client c(options);
            ADD_FAILURE() << options.url << " accepted";
        } catch (const dlock::error& e) {
            EXPECT_EQ(e.code(), dlock::errc::invalid_argument) << options.url;
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
    }
}

}  // namespace
