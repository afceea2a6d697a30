// The etcd backend's pure logic (docs/etcd.md): URLs, the key prefix of a name (etcdctl lock's),
// the queue key of a lease and the end of a prefix range.
#include <dlock/error.hpp>
#include <gtest/gtest.h>

#include <string>

#include "etcd/url.hpp"

namespace {

using dlock::etcd::detail::etcd_endpoint;
using dlock::etcd::detail::parse_etcd_url;

etcd_endpoint parse_ok(const std::string& url) {
    std::error_code ec;
    auto out = parse_etcd_url(url, ec);
    EXPECT_FALSE(ec) << url << ": " << ec.message();
    return out;
}

TEST(EtcdUrl, HostsPortsAndPrefix) {
    auto e = parse_ok("etcd://a");
    EXPECT_EQ(e.hosts, std::vector<std::string>{"a:2379"});
    EXPECT_EQ(e.prefix, "");
    e = parse_ok("ETCD://a:1,b,[::1]:3/app/locks");
    EXPECT_EQ(e.hosts, (std::vector<std::string>{"a:1", "b:2379", "[::1]:3"}));
    EXPECT_EQ(e.prefix, "app/locks/");
    EXPECT_EQ(parse_ok("etcd://a/").prefix, "");
    EXPECT_EQ(parse_ok("etcd://a/p/").prefix, "p/");
    EXPECT_EQ(parse_ok("etcd://a/p%20q").prefix, "p q/");
}

TEST(EtcdUrl, BadUrlsNameWhatIsWrongWithoutThePassword) {
    for (const std::string url :
         {"etcd://", "etcd://a:0", "etcd://a:99999", "etcd://a,,b", "etcd://S3cretPw@a",
          "etcd://:S3cretPw@a", "etcd://u:S3cret/Pw@a", "etcd://a?password=S3cretPw", "etcd://a#x",
          "etcd://a/%zz", "etcd://a/x%01", "zk://a"}) {
        std::error_code ec;
        (void)parse_etcd_url(url, ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << url;
        const auto message = dlock::last_error_message(ec);
        EXPECT_EQ(message.find("S3cret"), std::string::npos) << message;
    }
}

TEST(EtcdUrl, UserAndPassword) {
    auto e = parse_ok("etcd://root:p%40ss@a,b/x");
    EXPECT_EQ(e.user, "root");
    EXPECT_EQ(e.password, "p@ss");
    EXPECT_EQ(e.hosts, (std::vector<std::string>{"a:2379", "b:2379"}));
    EXPECT_EQ(e.prefix, "x/");
    e = parse_ok("etcds://u:p@a?tls_ca=/c.pem");
    EXPECT_EQ(e.user, "u");
    EXPECT_TRUE(e.secure);
    EXPECT_EQ(parse_ok("etcd://a").user, "");
    std::error_code ec;
    (void)parse_etcd_url("etcd://root:@a", ec);  // the password must come from somewhere
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
}

TEST(EtcdUrl, EtcdsTakesTheTlsQueryOptions) {
    auto e = parse_ok(
        "ETCDS://a,b:1/p?tls_ca=/c.pem&tls_cert=/x.pem&tls_key=/x.key"
        "&tls_server_name=n&tls_insecure=0");
    EXPECT_TRUE(e.secure);
    EXPECT_EQ(e.hosts, (std::vector<std::string>{"a:2379", "b:1"}));
    EXPECT_EQ(e.prefix, "p/");
    EXPECT_EQ(e.tls.ca_file, "/c.pem");
    EXPECT_EQ(e.tls.cert_file, "/x.pem");
    EXPECT_EQ(e.tls.key_file, "/x.key");
    EXPECT_EQ(e.tls.server_name, "n");
    EXPECT_FALSE(e.tls.insecure_skip_verify);
    EXPECT_FALSE(parse_ok("etcd://a").secure);
    // The URL's settings come first; the options fill the rest.
    std::error_code ec;
    e = parse_ok("etcds://a?tls_ca=/url.pem");
    dlock::etcd::detail::apply_tls_options(e, {.ca_file = "/o.pem", .server_name = "s"}, ec);
    EXPECT_FALSE(ec);
    EXPECT_EQ(e.tls.ca_file, "/url.pem");
    EXPECT_EQ(e.tls.server_name, "s");
    e = parse_ok("etcd://a");
    dlock::etcd::detail::apply_tls_options(e, {.insecure_skip_verify = true}, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    for (const std::string url :
         {"etcd://a?tls_ca=/c.pem", "etcds://a?tls_ca_dir=/d", "etcds://a?tls_cert=/x.pem",
          "etcds://a?tls_insecure=2", "etcds://a?tls_ca=", "etcds://a?other=1"}) {
        (void)parse_etcd_url(url, ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << url;
    }
}

TEST(EtcdUrl, KeysAreThoseOfEtcdctlLock) {
    const auto e = parse_ok("etcd://a");
    EXPECT_EQ(dlock::etcd::detail::key_prefix(e, "jobs/n"), "jobs/n/");
    EXPECT_EQ(dlock::etcd::detail::queue_key("n/", 0x694d7f0c1a2b3c4d), "n/694d7f0c1a2b3c4d");
    EXPECT_EQ(dlock::etcd::detail::queue_key("n/", 0x1f), "n/1f");
    EXPECT_EQ(dlock::etcd::detail::prefix_range_end("n/"), "n0");
    EXPECT_EQ(dlock::etcd::detail::prefix_range_end(std::string("a\xff", 2)), "b");
    EXPECT_EQ(dlock::etcd::detail::prefix_range_end(std::string("\xff", 1)), std::string(1, '\0'));
}

}  // namespace
