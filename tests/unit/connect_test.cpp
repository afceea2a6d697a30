// dlock::connect() and dlock::parse_service_url() without a server (clients connect lazily):
// which backend each scheme gets, every refusal with a message naming the scheme or the problem,
// and never a password. Also the one reading of user-info (dlock::url_password and
// dlock::url_with_password agree on every spelling).
#include <gtest/gtest.h>

#include <dlock/config.hpp>
#include <dlock/connect.hpp>
#include <dlock/error.hpp>
#include <dlock/url.hpp>

#include <functional>
#include <string>
#include <vector>

#if DLOCK_HAS_REDIS
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#endif
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif

namespace {

// Runs `f`, expects a dlock::error with `code`; returns its message.
std::string error_of(const std::function<void()>& f, dlock::errc code) {
    try {
        f();
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "no dlock::error";
    return {};
}

std::string parse_error(const std::string& url, dlock::errc code) {
    return error_of([&] { (void)dlock::parse_service_url(url); }, code);
}

TEST(ParseServiceUrl, RedisSchemesAreOneServer) {
    for (const char* url : {"redis://h:1/2", "rediss://h", "unix:///tmp/r.sock?db=1"}) {
        const auto s = dlock::parse_service_url(url);
        EXPECT_EQ(s.kind, dlock::service_kind::redis) << url;
        EXPECT_EQ(s.servers, std::vector<std::string>{url});
    }
}

TEST(ParseServiceUrl, RedlockGivesEveryServerTheUserInfoAndDb) {
    const auto s = dlock::parse_service_url("redlock://al:p%40w@a:1,b:2,[::1]:3/4");
    EXPECT_EQ(s.kind, dlock::service_kind::redlock);
    EXPECT_EQ(s.servers,
              (std::vector<std::string>{"redis://al:p%40w@a:1/4", "redis://al:p%40w@b:2/4",
                                        "redis://al:p%40w@[::1]:3/4"}));
    // The user-info ends at the last '@': a password's unencoded '@' stays in it.
    const auto at = dlock::parse_service_url("redlock://:p@w@a:1,b:2");
    EXPECT_EQ(at.servers.front(), "redis://:p@w@a:1");
}

TEST(ParseServiceUrl, MalformedRedlockLists) {
    EXPECT_NE(parse_error("redlock://a:1,,b:2", dlock::errc::invalid_argument).find("empty server"),
              std::string::npos);
    EXPECT_NE(parse_error("redlock://a:1,a:1", dlock::errc::invalid_argument).find("listed twice"),
              std::string::npos);
    // A server URL in the list is named as such, not garbled into hosts and a path.
    const auto mixed = parse_error("redlock://:S3cretPw@a:1,unix:///tmp/r.sock,b:2",
                                   dlock::errc::invalid_argument);
    EXPECT_NE(mixed.find("each server is host:port"), std::string::npos) << mixed;
    EXPECT_EQ(mixed.find("S3cret"), std::string::npos) << mixed;
}

TEST(ParseServiceUrl, RedlockGivesEveryServerTheQuery) {
    EXPECT_EQ(dlock::parse_service_url("redlock://a:1,b:2/3?user=u&password=p").servers,
              (std::vector<std::string>{"redis://a:1/3?user=u&password=p",
                                        "redis://b:2/3?user=u&password=p"}));
}

TEST(ParseServiceUrl, SchemesAreCaseInsensitive) {
    EXPECT_EQ(dlock::parse_service_url("REDIS://h:1").servers,
              std::vector<std::string>{"redis://h:1"});
    const auto redlock = dlock::parse_service_url("Redlock://a:1,b:2,c:3");
    EXPECT_EQ(redlock.kind, dlock::service_kind::redlock);
    EXPECT_EQ(redlock.servers.front(), "redis://a:1");
    EXPECT_EQ(dlock::parse_service_url("UNIX:///s.sock").servers,
              std::vector<std::string>{"unix:///s.sock"});
#if DLOCK_HAS_ZOOKEEPER
    EXPECT_EQ(dlock::parse_service_url("ZK://a:1/x").kind, dlock::service_kind::zookeeper);
#endif
}

TEST(ParseServiceUrl, UnknownAndMissingSchemes) {
    EXPECT_NE(parse_error("foo://h", dlock::errc::invalid_argument).find("unknown scheme \"foo\""),
              std::string::npos);
    const auto none = parse_error("localhost:6379", dlock::errc::invalid_argument);
    EXPECT_NE(none.find("no scheme"), std::string::npos) << none;
    EXPECT_NE(none.find("URL \"localhost:6379\""), std::string::npos) << none;
}

TEST(ParseServiceUrl, ZooKeeperNeedsItsComponent) {
#if DLOCK_HAS_ZOOKEEPER
    EXPECT_EQ(dlock::parse_service_url("zk://a:1,b:2/x").kind, dlock::service_kind::zookeeper);
#else
    const auto message = parse_error("zk://a:1/x", dlock::errc::unsupported);
    EXPECT_NE(message.find("zk://"), std::string::npos) << message;
    EXPECT_NE(message.find("ZooKeeper"), std::string::npos) << message;
#endif
}

TEST(ParseServiceUrl, EtcdNeedsItsComponent) {
#if DLOCK_HAS_ETCD
    const auto parsed = dlock::parse_service_url("ETCD://a:1,b:2/x");
    EXPECT_EQ(parsed.kind, dlock::service_kind::etcd);
    EXPECT_STREQ(dlock::to_string(parsed.kind), "etcd");
#else
    const auto message = parse_error("etcd://a:1/x", dlock::errc::unsupported);
    EXPECT_NE(message.find("etcd://"), std::string::npos) << message;
    EXPECT_NE(message.find("DLOCK_WITH_ETCD"), std::string::npos) << message;
#endif
}

TEST(ParseServiceUrl, MessagesNeverShowThePassword) {
    for (const std::string url : {"redlock://:S3cretPw@a:1,,b:2", "redlock://u:S3cretPw@a:1,a:1",
                                  "redlock://S3cretPw@a,a", "foo://u:S3cretPw@h", "u:S3cretPw@h"}) {
        try {
            (void)dlock::parse_service_url(url);
            ADD_FAILURE() << "accepted";
        } catch (const dlock::error& e) {
            EXPECT_EQ(std::string(e.what()).find("S3cret"), std::string::npos) << e.what();
        }
    }
}

#if DLOCK_HAS_REDIS
TEST(Connect, EachSchemeGetsItsBackend) {
    auto single = dlock::connect("redis://127.0.0.1:1", {.key_prefix = "p"});
    auto* redis = dynamic_cast<dlock::redis::client*>(single.get());
    ASSERT_NE(redis, nullptr);
    EXPECT_EQ(redis->options().key_prefix, "p");
    EXPECT_EQ(redis->options().url, "redis://127.0.0.1:1");
    EXPECT_NE(dynamic_cast<dlock::redis::client*>(dlock::connect("unix:///tmp/x.sock").get()),
              nullptr);
    auto quorum = dlock::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3");
    auto* redlock = dynamic_cast<dlock::redlock::client*>(quorum.get());
    ASSERT_NE(redlock, nullptr);
    EXPECT_EQ(redlock->size(), 3u);
    EXPECT_EQ(redlock->quorum(), 2u);
}

TEST(Connect, CommonOptionsReachTheClient) {
    using namespace std::chrono_literals;
    auto b = dlock::connect("redis://h:1", {.connect_timeout = 250ms, .password = "p@ss"});
    const auto& o = dynamic_cast<dlock::redis::client&>(*b).options();
    EXPECT_EQ(o.connect_timeout, 250ms);
    EXPECT_EQ(o.url, "redis://:p%40ss@h:1");  // percent-encoded into the user-info
    EXPECT_EQ(o.key_prefix, "dlock");         // unset: the backend's default
    const auto zero =
        error_of([] { (void)dlock::connect("redis://h:1", {.connect_timeout = 0ms}); },
                 dlock::errc::invalid_argument);
    EXPECT_NE(zero.find("connect_timeout"), std::string::npos) << zero;
}

TEST(Connect, CommandTimeoutReachesTheRedisFamily) {
    using namespace std::chrono_literals;
    auto single = dlock::connect("redis://h:1", {.command_timeout = 300ms});
    EXPECT_EQ(dynamic_cast<dlock::redis::client&>(*single).options().command_timeout, 300ms);
    EXPECT_NE(dlock::connect("redlock://h:1,h:2,h:3", {.command_timeout = 300ms}), nullptr);
    const auto zero =
        error_of([] { (void)dlock::connect("redis://h:1", {.command_timeout = 0ms}); },
                 dlock::errc::invalid_argument);
    EXPECT_NE(zero.find("command_timeout"), std::string::npos) << zero;
#if DLOCK_HAS_ZOOKEEPER
    const auto zk = error_of([] { (void)dlock::connect("zk://h:1/x", {.command_timeout = 300ms}); },
                             dlock::errc::invalid_argument);
    EXPECT_NE(zk.find("command timeout applies to Redis"), std::string::npos) << zk;
#endif
}

TEST(Connect, NodeTimeoutIsForRedlockOnly) {
    using namespace std::chrono_literals;
    EXPECT_NE(dlock::connect("redlock://h:1,h:2,h:3", {.node_timeout = 300ms}), nullptr);
    const auto zero =
        error_of([] { (void)dlock::connect("redlock://h:1,h:2,h:3", {.node_timeout = 0ms}); },
                 dlock::errc::invalid_argument);
    EXPECT_NE(zero.find("node_timeout must be > 0"), std::string::npos) << zero;
    const auto single =
        error_of([] { (void)dlock::connect("redis://:pw@h:1", {.node_timeout = 300ms}); },
                 dlock::errc::invalid_argument);
    EXPECT_NE(single.find("a node timeout applies to redlock:// only"), std::string::npos)
        << single;
    EXPECT_EQ(single.find("pw"), std::string::npos) << single;
#if DLOCK_HAS_ZOOKEEPER
    const auto zk = error_of([] { (void)dlock::connect("zk://h:1/x", {.node_timeout = 300ms}); },
                             dlock::errc::invalid_argument);
    EXPECT_NE(zk.find("redlock:// only"), std::string::npos) << zk;
#endif
}

TEST(Connect, RedisUrlErrorsAreNeutralAndRedacted) {
    const auto message = error_of([] { (void)dlock::connect("redis://u:S3cretPw@h:99999"); },
                                  dlock::errc::invalid_argument);
    EXPECT_EQ(message.find("S3cret"), std::string::npos) << message;
    EXPECT_EQ(message.find("client_options"), std::string::npos) << message;
    EXPECT_NE(message.find("URL \"redis://u:***@h:99999\""), std::string::npos) << message;
    const auto tls = error_of(
        [] {
            (void)dlock::connect("redis://h", {.tls = dlock::tls_options{.ca_file = "/ca.pem"}});
        },
        dlock::errc::invalid_argument);
    EXPECT_NE(tls.find("rediss://"), std::string::npos) << tls;
    const auto prefix = error_of([] { (void)dlock::connect("redis://h", {.key_prefix = "a{b"}); },
                                 dlock::errc::invalid_argument);
    EXPECT_NE(prefix.find("key prefix \"a{b\""), std::string::npos) << prefix;
}

TEST(Connect, APasswordIsGivenOnce) {
    // A lone "secret@" is a password (as the Redis URL parser and redaction read it), so a
    // second one is refused rather than turning the first into a user name that messages show.
    for (const std::string url :
         {"redis://S3cretPw@h", "redis://u:S3cretPw@h", "redlock://S3cretPw@a:1,b:2"}) {
        const auto message = error_of([&] { (void)dlock::connect(url, {.password = "0therPw"}); },
                                      dlock::errc::invalid_argument);
        EXPECT_NE(message.find("password already"), std::string::npos) << message;
        EXPECT_EQ(message.find("S3cret"), std::string::npos) << message;
        EXPECT_EQ(message.find("0ther"), std::string::npos) << message;
    }
    // Every Redis scheme takes one, unix:// too (connects lazily: nothing is opened here).
    EXPECT_NE(dlock::connect("unix:///tmp/x.sock", {.password = "0therPw"}), nullptr);
    const auto twice = error_of(
        [] {
            (void)dlock::connect("unix:///tmp/x.sock?password=S3cretPw", {.password = "0therPw"});
        },
        dlock::errc::invalid_argument);
    EXPECT_NE(twice.find("password already"), std::string::npos) << twice;
    EXPECT_EQ(twice.find("S3cret"), std::string::npos) << twice;
    EXPECT_EQ(twice.find("0ther"), std::string::npos) << twice;
}
#endif

#if DLOCK_HAS_ZOOKEEPER
TEST(Connect, ZooKeeperTakesItsBaseFromTheUrl) {
    auto b = dlock::connect("zk://127.0.0.1:1/base");
    ASSERT_NE(dynamic_cast<dlock::zk::client*>(b.get()), nullptr);
    (void)error_of([] { (void)dlock::connect("zk://h:1/x", {.key_prefix = "p"}); },
                   dlock::errc::invalid_argument);
    const auto pw = error_of([] { (void)dlock::connect("zk://h:1/x", {.password = "0therPw"}); },
                             dlock::errc::invalid_argument);
    EXPECT_EQ(pw.find("0ther"), std::string::npos) << pw;
}
#endif

// --- user-info: one reading -------------------------------------------------------------------

TEST(UrlPassword, OneReadingOfUserInfo) {
    // url_password() finds a password exactly when url_with_password() refuses to add one.
    for (const std::string url :
         {"redis://h", "redis://secret@h", "redis://alice:@h", "redis://alice:pw@h",
          "redis://:pw@h", "redis://:@h", "redis://@h", "redis://a:p/w?x@y@h/0",
          "redlock://secret@a:1,b:2", "redlock://u:p@a:1,b:2", "redis://p@w@h"}) {
        const bool has = dlock::url_password(url).has_value();
        bool refused = false;
        try {
            (void)dlock::url_with_password(url, "x");
        } catch (const dlock::error&) {
            refused = true;
        }
        EXPECT_EQ(has, refused) << url;
    }
}

TEST(UrlPassword, SpansAndInsertion) {
    const std::string lone = "redis://secret@h";
    ASSERT_TRUE(dlock::url_password(lone));
    EXPECT_EQ(lone.substr(dlock::url_password(lone)->first, dlock::url_password(lone)->second),
              "secret");
    const std::string with_user = "redis://alice:p@w@h:1";
    ASSERT_TRUE(dlock::url_password(with_user));
    EXPECT_EQ(with_user.substr(dlock::url_password(with_user)->first,
                               dlock::url_password(with_user)->second),
              "p@w");
    EXPECT_FALSE(dlock::url_password("alice:pw@host"));  // no scheme: not a URL
    EXPECT_EQ(dlock::url_with_password("redis://h:1/2", "p w"), "redis://:p%20w@h:1/2");
    EXPECT_EQ(dlock::url_with_password("redis://alice:@h", "pw"), "redis://alice:pw@h");
    EXPECT_EQ(dlock::url_with_password("redlock://a:1,b:2", "pw"), "redlock://:pw@a:1,b:2");
    (void)error_of([] { (void)dlock::url_with_password("h:1", "pw"); },
                   dlock::errc::invalid_argument);
}

}  // namespace
