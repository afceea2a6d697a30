// etcds:// and user/password auth (docs/etcd.md): the etcd backend over TLS against private etcd
// members serving the shared test certificates (lock and unlock with the CA, an unknown CA and a
// wrong server name refused with their cause and the address, mutual TLS, the insecure mode,
// etcdctl over TLS on the same keys), and against a member with auth enabled (the right and a
// wrong password, never shown; a token etcd dropped is renewed).
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

/// For the clients that must connect: a TLS handshake and the session's grant (a Raft write)
/// missed the clients' default 2 s on a loaded 2-core machine.
std::chrono::milliseconds connect_timeout() { return scaled(10s); }

/// One member serving TLS with the shared certificates (no client certificate needed).
dlock::test::etcd_cluster& tls_etcd() {
    static dlock::test::etcd_cluster etcd(1, {.tls = {.ca = shared_tls_certs().ca(),
                                                      .cert = shared_tls_certs().cert("server"),
                                                      .key = shared_tls_certs().key("server")}});
    return etcd;
}

/// One member that also requires a client certificate signed by the CA.
dlock::test::etcd_cluster& mutual_etcd() {
    static dlock::test::etcd_cluster etcd(
        1, {.tls = {.ca = shared_tls_certs().ca(),
                    .cert = shared_tls_certs().cert("server"),
                    .key = shared_tls_certs().key("server"),
                    .client_cert_auth = true,
                    .client_cert = shared_tls_certs().cert("client"),
                    .client_key = shared_tls_certs().key("client")}});
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
                                    .url = tls_etcd().url() + "?tls_ca=" + shared_tls_certs().ca(),
       .connect_timeout = connect_timeout()},
                                dlock::etcd::client_options{.url = tls_etcd().url(),
                                .connect_timeout = connect_timeout(),
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
        {.url = tls_etcd().url() + "?tls_server_name=localhost&tls_ca=" + shared_tls_certs().ca(),
         .connect_timeout = connect_timeout()});
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
                              .connect_timeout = connect_timeout(),
                              .tls = {.ca_file = shared_tls_certs().ca(),
                                      .cert_file = shared_tls_certs().cert("client"),
                                      .key_file = shared_tls_certs().key("client")}});
    auto l = with.acquire(dlock::test::unique_name("etcd-mtls"), {.wait = scaled(5s)});
    EXPECT_EQ(l.state(), dlock::lock_state::held);
}

TEST(EtcdTls, InsecureSkipsVerification) {
    dlock::etcd::client c(
        {.url = tls_etcd().url() + "?tls_insecure=1", .connect_timeout = connect_timeout()});
    auto l = c.acquire(dlock::test::unique_name("etcd-tls-insecure"), {.wait = scaled(5s)});
    EXPECT_EQ(l.state(), dlock::lock_state::held);
}

TEST(EtcdTls, ConnectTakesEtcdsUrlsAndTlsOptions) {
    auto b = dlock::connect(tls_etcd().url(),
                            {.connect_timeout = connect_timeout(),
                             .tls = dlock::tls_options{.ca_file = shared_tls_certs().ca()}});
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

constexpr const char* root_password = "Pa55-w0rd";

/// One plain member with authentication enabled (user root, root_password).
dlock::test::etcd_cluster& auth_etcd() {
    static dlock::test::etcd_cluster etcd(1);
    static const bool enabled = (etcd.enable_auth(root_password), true);
    (void)enabled;
    return etcd;
}

/// `url` with `userinfo` + "@" after its "://".
std::string with_user(const std::string& url, const std::string& userinfo) {
    const auto at = url.find("://") + 3;
    return url.substr(0, at) + userinfo + "@" + url.substr(at);
}

TEST(EtcdAuth, TheRightPasswordWorks) {
    const auto url = with_user(auth_etcd().url(), std::string("root:") + root_password);
    dlock::etcd::client a({.url = url, .connect_timeout = connect_timeout()});
    dlock::etcd::client b({.url = url, .connect_timeout = connect_timeout()});
    const auto name = dlock::test::unique_name("etcd-auth");
    auto l = a.acquire(name, {.wait = scaled(5s)});
    EXPECT_EQ(l.state(), dlock::lock_state::held);
    std::error_code ec;
    auto none = b.acquire(name, {.wait = 0ms}, ec);
    EXPECT_EQ(ec, dlock::errc::timeout) << dlock::last_error_message(ec);
    const auto got = auth_etcd().etcdctl({"get", "--prefix", "--keys-only", name + "/"});
    EXPECT_NE(got.out.find(a.key_of(l)), std::string::npos) << got.out;
    l.release();
    // The password apart from the URL (connect_options::password), the user in it.
    auto c = dlock::connect(with_user(auth_etcd().url(), "root:"),
                            {.connect_timeout = connect_timeout(), .password = root_password});
    auto m = c->acquire(name, {.wait = scaled(5s)});
    EXPECT_GT(m.fencing_token(), 0u);
}

TEST(EtcdAuth, AWrongPasswordIsAnAuthErrorThatNeverShowsIt) {
    const std::string secret = "Wr0ng-Secret";
    dlock::etcd::client c({.url = with_user(auth_etcd().url(), "root:" + secret)});
    std::error_code ec;
    const auto message = refusal(c, ec);
    EXPECT_EQ(ec, dlock::errc::auth_failed) << message;
    EXPECT_NE(message.find("\"root\""), std::string::npos) << message;
    EXPECT_NE(message.find(auth_etcd().endpoint(0)), std::string::npos) << message;
    EXPECT_EQ(message.find(secret), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    // No user at all: etcd refuses the request, and that is an auth error too.
    dlock::etcd::client anonymous({.url = auth_etcd().url()});
    (void)refusal(anonymous, ec);
    EXPECT_EQ(ec, dlock::errc::auth_failed) << dlock::last_error_message(ec);
    // A URL's password is redacted wherever the URL is quoted.
    try {
        dlock::etcd::client bad({.url = with_user("etcd://127.0.0.1:1", "root:" + secret) + "#x"});
        ADD_FAILURE() << "accepted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(std::string(e.what()).find(secret), std::string::npos) << e.what();
    }
}

// etcd drops every token when auth is disabled and enabled again: the next request is refused
// with "invalid auth token", and the client authenticates again once and goes on.
TEST(EtcdAuth, ATokenEtcdDroppedIsRenewed) {
    dlock::etcd::client c(
        {.url = with_user(auth_etcd().url(), std::string("root:") + root_password),
         .connect_timeout = connect_timeout()});
    const auto name = dlock::test::unique_name("etcd-auth-token");
    c.acquire(name, {.wait = scaled(5s)}).release();
    ASSERT_EQ(auth_etcd().etcdctl({"auth", "disable"}).status, 0);
    ASSERT_EQ(auth_etcd().etcdctl({"auth", "enable"}).status, 0);
    std::error_code ec;
    auto l = c.acquire(name, {.wait = scaled(5s)}, ec);
    EXPECT_FALSE(ec) << dlock::last_error_message(ec);
    EXPECT_EQ(l.state(), dlock::lock_state::held);
}

}  // namespace
