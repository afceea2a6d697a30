// rediss:// against Debian's redis-server with --tls-port and certificates made at start
// (tls_certs): locking and waiting over TLS, connect(), and each refusal with the error that names
// its cause: a wrong host name, an unknown CA, an expired certificate, a missing client
// certificate; never SIGPIPE (docs/tls.md). One server per binary; tests that change its
// certificate or tls-auth-clients put them back (server_cert below).
#include <dlock/connect.hpp>
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#include <dlock/url.hpp>
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>

#include <csignal>
#include <chrono>
#include <string>
#include <thread>

#include "redis/transport.hpp"
#include "redis/url.hpp"
#include "redis_server.hpp"
#include "test_env.hpp"
#include "tls_certs.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;

/// The server serves `name`'s certificate (and asks for client certificates when `require`)
/// while this lives; new connections see it.
class server_cert {
public:
    explicit server_cert(const std::string& name, bool require_client = false) {
        set(name, require_client ? "yes" : "optional");
    }
    ~server_cert() { set("server", "optional"); }
    server_cert(const server_cert&) = delete;
    server_cert& operator=(const server_cert&) = delete;

private:
    static void set(const std::string& name, const char* auth) {
        EXPECT_EQ(dlock::test::shared_tls_redis().command(
                      {"CONFIG", "SET", "tls-cert-file", dlock::test::shared_tls_certs().cert(name),
                       "tls-key-file", dlock::test::shared_tls_certs().key(name),
                       "tls-auth-clients", auth}),
                  "OK");
    }
};

dlock::redis::client_options tls_client(dlock::tls_options tls = {
                                            .ca_file = dlock::test::shared_tls_certs().ca()}) {
    return {.url = dlock::test::shared_tls_redis().tls_url(),
            .connect_timeout = scaled(2s),
            .command_timeout = scaled(2s),
            .tls = std::move(tls)};
}

/// The message of the error that ping() throws on `c` (fails the test if it succeeds).
std::string ping_error(dlock::redis::client& c,
                       dlock::errc expected = dlock::errc::connection_failed) {
    try {
        c.ping();
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::make_error_code(expected)) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "ping over TLS succeeded";
    return {};
}

TEST(RedisTls, LocksAndWakesWaitersOverTls) {
    dlock::redis::client c(tls_client());
    c.ping();
    const auto name = dlock::test::unique_name("tls");
    auto held = c.acquire(name, {.lease = 10s});
    EXPECT_GT(held.fencing_token(), 0U);
    dlock::mutex b(c, name, {.lease = 10s});
    EXPECT_FALSE(b.try_lock());
    // A waiter is woken by the release's message on the subscriber connection (over TLS too).
    std::thread releaser([&] {
        std::this_thread::sleep_for(50ms);  // lets b start waiting; correctness does not need it
        held.release();
    });
    EXPECT_TRUE(b.try_lock_for(scaled(5s)));
    releaser.join();
    b.unlock();
    // The same through the URL's query options instead of client_options::tls.
    dlock::redis::client q({.url = dlock::test::shared_tls_redis().tls_url() +
                                   "?tls_ca=" + dlock::test::shared_tls_certs().ca()});
    EXPECT_EQ(q.command({"ECHO", "over tls"}).text, "over tls");
}

TEST(RedisTls, ConnectTakesRedissWithOptionsOrQuery) {
    auto by_options = dlock::connect(
        dlock::test::shared_tls_redis().tls_url(),
        {.tls = dlock::tls_options{.ca_file = dlock::test::shared_tls_certs().ca()}});
    dlock::mutex m(*by_options, dlock::test::unique_name("tls-connect"), {.lease = 10s});
    ASSERT_TRUE(m.try_lock());
    m.unlock();
    auto by_query = dlock::connect(dlock::test::shared_tls_redis().tls_url() +
                                   "?tls_ca=" + dlock::test::shared_tls_certs().ca());
    dlock::mutex n(*by_query, dlock::test::unique_name("tls-connect"), {.lease = 10s});
    ASSERT_TRUE(n.try_lock());
    n.unlock();
    // redlock:// with TLS options: its servers are rediss:// (one server here: a quorum of 1).
    auto redlock = dlock::connect(
        "redlock://127.0.0.1:" + std::to_string(dlock::test::shared_tls_redis().tls_port()),
        {.tls = dlock::tls_options{.ca_file = dlock::test::shared_tls_certs().ca()}});
    dlock::mutex r(*redlock, dlock::test::unique_name("tls-redlock"), {.lease = 10s});
    ASSERT_TRUE(r.try_lock());
    r.unlock();
}

TEST(RedisTls, WrongHostNameIsRefusedNamingIt) {
    // The certificate is for localhost and 127.0.0.1, not for the name the client expects.
    dlock::redis::client named(
        tls_client({.ca_file = dlock::test::shared_tls_certs().ca(), .server_name = "db.example"}));
    const auto by_name = ping_error(named);
    EXPECT_NE(by_name.find("hostname mismatch"), std::string::npos) << by_name;
    EXPECT_NE(by_name.find("db.example"), std::string::npos) << by_name;
    // An IP address is checked as an address: a certificate for DNS:localhost only does not
    // cover 127.0.0.1.
    const server_cert localhost_only("localhost");
    dlock::redis::client by_ip(tls_client());
    const auto ip = ping_error(by_ip);
    EXPECT_NE(ip.find("hostname mismatch"), std::string::npos) << ip;
    // ... and a DNS name as a name: the same certificate is right for localhost.
    dlock::redis::client by_host(
        {.url = "rediss://localhost:" + std::to_string(dlock::test::shared_tls_redis().tls_port()) +
                "?tls_ca=" + dlock::test::shared_tls_certs().ca()});
    EXPECT_EQ(by_host.command({"ECHO", "named"}).text, "named");
}

TEST(RedisTls, UnknownCaIsRefusedNamingIt) {
    {
        // Verification is on by default: the system trust store does not know the test CA.
        dlock::redis::client system_store(tls_client({}));
        const auto what = ping_error(system_store);
        EXPECT_NE(what.find("unknown CA"), std::string::npos) << what;
    }
    const server_cert stranger("stranger");
    dlock::redis::client c(tls_client());
    const auto what = ping_error(c);
    EXPECT_NE(what.find("certificate verify failed: unknown CA"), std::string::npos) << what;
    // The loudly named opt-out accepts it.
    dlock::redis::client insecure(tls_client({.insecure_skip_verify = true}));
    EXPECT_EQ(insecure.command({"ECHO", "unverified"}).text, "unverified");
}

TEST(RedisTls, ExpiredCertificateIsRefusedNamingIt) {
    const server_cert expired("expired");
    dlock::redis::client c(tls_client());
    const auto what = ping_error(c);
    EXPECT_NE(what.find("certificate has expired"), std::string::npos) << what;
}

TEST(RedisTls, MissingClientCertificateIsRefusedNamingIt) {
    const server_cert required("server", true);
    dlock::redis::client without(tls_client());
    const auto what = ping_error(without);
    EXPECT_NE(what.find("client certificate"), std::string::npos) << what;
    dlock::redis::client with(
        tls_client({.ca_file = dlock::test::shared_tls_certs().ca(),
                    .cert_file = dlock::test::shared_tls_certs().cert("client"),
                    .key_file = dlock::test::shared_tls_certs().key("client")}));
    EXPECT_EQ(with.command({"ECHO", "mutual"}).text, "mutual");
}

TEST(RedisTls, ServerDroppingTheConnectionNeverRaisesSigpipe) {
    // A TLS 1.3 server that refuses the missing client certificate closes the connection after
    // the handshake, while the client writes: with write(2) that is SIGPIPE, which kills the
    // process (the default action, restored here in case the runner ignores it).
    const server_cert required("server", true);
    const auto previous = std::signal(SIGPIPE, SIG_DFL);
    dlock::redis::client c(tls_client());
    const std::string big(std::size_t{4} << 20, 'x');  // outlasts the socket buffers
    for (int i = 0; i < 5; ++i) {
        std::error_code ec;
        (void)c.command({"SET", dlock::test::unique_name("pipe"), big}, ec);
        EXPECT_EQ(ec, dlock::errc::connection_failed) << ec.message();
    }
    std::signal(SIGPIPE, previous);
}

TEST(RedisTls, WritingToAClosedStreamIsAnErrorNotSigpipe) {
    // The transport itself: after the handshake the socket's sending side is shut, so the next
    // send() fails with EPIPE, and would raise SIGPIPE without MSG_NOSIGNAL (OpenSSL's own
    // socket BIO writes with write(2)). The process must live and see connection_failed.
    const auto previous = std::signal(SIGPIPE, SIG_DFL);
    std::error_code ec;
    auto endpoint =
        dlock::detail::parse_redis_url(dlock::test::shared_tls_redis().tls_url() +
                                           "?tls_ca=" + dlock::test::shared_tls_certs().ca(),
                                       ec);
    ASSERT_FALSE(ec);
    auto stream = dlock::redis::detail::make_transport(endpoint, ec);
    ASSERT_FALSE(ec) << ec.message();
    bool connected = stream->start_connect(ec);
    const auto deadline = std::chrono::steady_clock::now() + scaled(5s);
    auto wait_for = [&](short events) {
        pollfd p{stream->native_handle(), events, 0};
        ::poll(&p, 1, 100);
        return std::chrono::steady_clock::now() < deadline;
    };
    while (!connected && !ec && wait_for(POLLOUT)) connected = stream->finish_connect(ec);
    ASSERT_TRUE(connected) << ec.message();
    bool shaken = stream->handshake(ec);
    while (!shaken && !ec &&
           wait_for(stream->wanted_events(dlock::redis::detail::stream_op::handshake)))
        shaken = stream->handshake(ec);
    ASSERT_TRUE(shaken) << ec.message();
    ASSERT_EQ(::shutdown(stream->native_handle(), SHUT_WR), 0);
    (void)stream->write_some("*1\r\n$4\r\nPING\r\n", ec);
    EXPECT_EQ(ec, dlock::errc::connection_failed) << ec.message();
    stream->close();
    std::signal(SIGPIPE, previous);
}

TEST(RedisTls, BadOptionsAreRefusedAtConstruction) {
    try {
        dlock::redis::client c(
            tls_client({.ca_file = dlock::test::shared_tls_certs().dir() + "/missing.pem"}));
        ADD_FAILURE() << "a missing CA file was accepted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::make_error_code(dlock::errc::invalid_argument));
        EXPECT_NE(std::string(e.what()).find("missing.pem"), std::string::npos) << e.what();
    }
    try {
        dlock::redis::client c({.url = dlock::test::shared_tls_redis().url(),
                                .tls = {.ca_file = dlock::test::shared_tls_certs().ca()}});
        ADD_FAILURE() << "TLS options for redis:// were accepted";
    } catch (const dlock::error& e) {
        EXPECT_NE(std::string(e.what()).find("rediss://"), std::string::npos) << e.what();
    }
    // Paths are shown in redacted URLs; the password is not.
    const auto shown = dlock::redact_url("rediss://:hunter2@h:1?tls_ca=/etc/ca.pem&tls_insecure=1");
    EXPECT_NE(shown.find("tls_ca=/etc/ca.pem"), std::string::npos) << shown;
    EXPECT_NE(shown.find("tls_insecure=1"), std::string::npos) << shown;
    EXPECT_EQ(shown.find("hunter2"), std::string::npos) << shown;
}

}  // namespace
