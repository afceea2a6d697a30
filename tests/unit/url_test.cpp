// parse_redis_url: every accepted spelling, and every rejection with a message that names the
// problem and quotes the URL.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/redis/client.hpp>

#include "core/status.hpp"
#include "redis/sentinel.hpp"
#include "redis/url.hpp"

namespace {

using dlock::detail::parse_redis_url;
using dlock::detail::redis_endpoint;
using transport = redis_endpoint::transport;

redis_endpoint parse_ok(std::string_view url) {
    std::error_code ec = make_error_code(dlock::errc::timeout);  // must be cleared on success
    auto ep = parse_redis_url(url, ec);
    EXPECT_FALSE(ec) << url << ": " << ec.message() << " / " << dlock::detail::message_for(ec);
    return ep;
}

// Parses an invalid URL; returns the message stored for the error.
std::string parse_bad(std::string_view url) {
    std::error_code ec;
    (void)parse_redis_url(url, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << url;
    const auto message = dlock::detail::message_for(ec);
    // The message quotes the URL, with any password replaced by "***".
    std::string quoted(url);
    const auto scheme = quoted.find("://");
    const auto at = quoted.rfind('@');
    if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
        const auto colon = quoted.find(':', scheme + 3);
        const auto secret = (colon != std::string::npos && colon < at) ? colon + 1 : scheme + 3;
        EXPECT_EQ(message.find(quoted.substr(secret, at - secret) + "@"), std::string::npos)
            << "message leaks the password: " << message;
        quoted.replace(secret, at - secret, "***");
    }
    EXPECT_NE(message.find(quoted), std::string::npos)
        << "message does not quote the URL: " << message;
    return message;
}

TEST(ParseRedisUrl, HostOnlyUsesDefaults) {
    const auto ep = parse_ok("redis://cache.local");
    EXPECT_EQ(ep.kind, transport::tcp);
    EXPECT_EQ(ep.host, "cache.local");
    EXPECT_EQ(ep.port, 6379);
    EXPECT_EQ(ep.db, 0);
    EXPECT_TRUE(ep.user.empty());
    EXPECT_TRUE(ep.password.empty());
    EXPECT_FALSE(ep.has_password);
    EXPECT_EQ(ep.describe(), "cache.local:6379");
}

TEST(ParseRedisUrl, HostAndPort) {
    const auto ep = parse_ok("redis://127.0.0.1:6380");
    EXPECT_EQ(ep.host, "127.0.0.1");
    EXPECT_EQ(ep.port, 6380);
    EXPECT_EQ(ep.describe(), "127.0.0.1:6380");
}

TEST(ParseRedisUrl, PortBounds) {
    EXPECT_EQ(parse_ok("redis://h:1").port, 1);
    EXPECT_EQ(parse_ok("redis://h:65535").port, 65535);
}

TEST(ParseRedisUrl, Database) {
    const auto ep = parse_ok("redis://h:7000/5");
    EXPECT_EQ(ep.host, "h");
    EXPECT_EQ(ep.port, 7000);
    EXPECT_EQ(ep.db, 5);
    EXPECT_EQ(parse_ok("redis://h/12").db, 12);
    EXPECT_EQ(parse_ok("redis://h/").db, 0);  // empty path: default db
}

TEST(ParseRedisUrl, UserAndPassword) {
    const auto ep = parse_ok("redis://alice:s3cret@h:6390/2");
    EXPECT_EQ(ep.user, "alice");
    EXPECT_EQ(ep.password, "s3cret");
    EXPECT_TRUE(ep.has_password);
    EXPECT_EQ(ep.host, "h");
    EXPECT_EQ(ep.port, 6390);
    EXPECT_EQ(ep.db, 2);
}

TEST(ParseRedisUrl, EmptyUserWithPassword) {
    const auto ep = parse_ok("redis://:s3cret@h");
    EXPECT_TRUE(ep.user.empty());
    EXPECT_EQ(ep.password, "s3cret");
    EXPECT_TRUE(ep.has_password);
}

TEST(ParseRedisUrl, PasswordOnlySpelling) {
    const auto ep = parse_ok("redis://secret@h");
    EXPECT_TRUE(ep.user.empty()) << ep.user;
    EXPECT_EQ(ep.password, "secret");
    EXPECT_TRUE(ep.has_password);
    EXPECT_EQ(ep.host, "h");
}

TEST(ParseRedisUrl, PercentEscapesInUserAndPassword) {
    const auto ep = parse_ok("redis://us%40er%3a1:p%40ss%3Aw%2Fd%25@h");
    EXPECT_EQ(ep.user, "us@er:1");
    EXPECT_EQ(ep.password, "p@ss:w/d%");
    EXPECT_EQ(ep.host, "h");
}

TEST(ParseRedisUrl, PercentEscapeInPasswordOnlySpelling) {
    const auto ep = parse_ok("redis://p%40ss@h");
    EXPECT_TRUE(ep.user.empty());
    EXPECT_EQ(ep.password, "p@ss");
}

TEST(ParseRedisUrl, UnescapedAtInPasswordSplitsAtTheLastAt) {
    const auto ep = parse_ok("redis://u:p@ss@h");
    EXPECT_EQ(ep.user, "u");
    EXPECT_EQ(ep.password, "p@ss");
    EXPECT_EQ(ep.host, "h");
}

TEST(ParseRedisUrl, BadPercentEscapes) {
    EXPECT_NE(parse_bad("redis://u:pw%4@h").find("password"), std::string::npos);
    EXPECT_NE(parse_bad("redis://u:pw%zz@h").find("percent"), std::string::npos);
    EXPECT_NE(parse_bad("redis://u:%4x@h").find("password"), std::string::npos);
    EXPECT_NE(parse_bad("redis://u%zz:pw@h").find("user"), std::string::npos);
    EXPECT_NE(parse_bad("redis://u%4:pw@h").find("percent"), std::string::npos);
    EXPECT_NE(parse_bad("redis://u:%@h").find("percent"), std::string::npos);
}

TEST(ParseRedisUrl, Ipv6) {
    const auto ep = parse_ok("redis://[::1]:6380");
    EXPECT_EQ(ep.kind, transport::tcp);
    EXPECT_EQ(ep.host, "::1");
    EXPECT_EQ(ep.port, 6380);
    EXPECT_EQ(ep.describe(), "[::1]:6380");

    const auto bare = parse_ok("redis://[fe80::1]/3");
    EXPECT_EQ(bare.host, "fe80::1");
    EXPECT_EQ(bare.port, 6379);
    EXPECT_EQ(bare.db, 3);

    const auto with_auth = parse_ok("redis://u:p@[::1]:7000");
    EXPECT_EQ(with_auth.host, "::1");
    EXPECT_EQ(with_auth.port, 7000);
    EXPECT_EQ(with_auth.password, "p");
}

TEST(ParseRedisUrl, UnixSocket) {
    const auto ep = parse_ok("unix:///var/run/redis.sock");
    EXPECT_EQ(ep.kind, transport::unix_socket);
    EXPECT_EQ(ep.path, "/var/run/redis.sock");
    EXPECT_EQ(ep.db, 0);
    EXPECT_EQ(ep.describe(), "/var/run/redis.sock");
}

TEST(ParseRedisUrl, UnixSocketWithDb) {
    const auto ep = parse_ok("unix:///tmp/r.sock?db=3");
    EXPECT_EQ(ep.kind, transport::unix_socket);
    EXPECT_EQ(ep.path, "/tmp/r.sock");
    EXPECT_EQ(ep.db, 3);
}

TEST(ParseRedisUrl, UnixSocketBadQuery) {
    EXPECT_NE(parse_bad("unix:///tmp/r.sock?db=").find("db=N"), std::string::npos);
    EXPECT_NE(parse_bad("unix:///tmp/r.sock?db=x").find("db=N"), std::string::npos);
    // Query values other than db and user are redacted: not through parse_bad's quoting check.
    std::error_code ec;
    (void)parse_redis_url("unix:///tmp/r.sock?timeout=1", ec);
    EXPECT_NE(dlock::detail::message_for(ec).find("unknown query option \"timeout\""),
              std::string::npos);
}

TEST(ParseRedisUrl, RelativeUnixPath) {
    EXPECT_NE(parse_bad("unix://tmp/r.sock").find("absolute"), std::string::npos);
    EXPECT_NE(parse_bad("unix://").find("absolute"), std::string::npos);
}

TEST(ParseRedisUrl, TlsSchemeParses) {
    const auto ep = parse_ok("rediss://u:p@secure.example:6380/1");
    EXPECT_EQ(ep.kind, transport::tls);
    EXPECT_EQ(ep.host, "secure.example");
    EXPECT_EQ(ep.port, 6380);
    EXPECT_EQ(ep.db, 1);
}

TEST(ParseRedisUrl, TlsQueryOptions) {
    const auto ep = parse_ok(
        "rediss://h?tls_ca=/etc/ca.pem&tls_ca_dir=/etc/certs&tls_cert=/c.pem&tls_key=/c.key"
        "&tls_server_name=db.example&tls_insecure=1");
    EXPECT_EQ(ep.tls.ca_file, "/etc/ca.pem");
    EXPECT_EQ(ep.tls.ca_dir, "/etc/certs");
    EXPECT_EQ(ep.tls.cert_file, "/c.pem");
    EXPECT_EQ(ep.tls.key_file, "/c.key");
    EXPECT_EQ(ep.tls.server_name, "db.example");
    EXPECT_TRUE(ep.tls.insecure_skip_verify);
    EXPECT_FALSE(parse_ok("rediss://h?tls_insecure=0").tls.insecure_skip_verify);
    EXPECT_NE(parse_bad("redis://h?tls_ca=/ca.pem").find("rediss://"), std::string::npos);
    EXPECT_NE(parse_bad("rediss://h?tls_insecure=maybe").find("tls_insecure"), std::string::npos);
    EXPECT_NE(parse_bad("rediss://h?tls_cert=/c.pem").find("tls_key"), std::string::npos);
    EXPECT_NE(parse_bad("rediss://h?tls_ca=/a&tls_ca=/b").find("twice"), std::string::npos);
}

TEST(ParseRedisUrl, TlsOptionsFillWhatTheUrlLeaves) {
    std::error_code ec;
    auto ep = parse_ok("rediss://h?tls_ca=/url.pem");
    dlock::detail::apply_tls_options(ep, {.ca_file = "/options.pem", .server_name = "n"}, ec);
    EXPECT_FALSE(ec);
    EXPECT_EQ(ep.tls.ca_file, "/url.pem");
    EXPECT_EQ(ep.tls.server_name, "n");
    auto plain = parse_ok("redis://h");
    dlock::detail::apply_tls_options(plain, {.insecure_skip_verify = true}, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument);
    dlock::detail::apply_tls_options(plain, {}, ec);
    EXPECT_FALSE(ec);
}

TEST(ParseRedisUrl, MissingScheme) {
    const auto m = parse_bad("localhost:6379");
    EXPECT_NE(m.find("redis://"), std::string::npos) << m;
}

TEST(ParseRedisUrl, UnknownScheme) {
    const auto m = parse_bad("http://localhost:6379");
    EXPECT_NE(m.find("scheme"), std::string::npos) << m;
    EXPECT_NE(m.find("\"http\""), std::string::npos) << m;
}

TEST(ParseRedisUrl, EmptyHost) {
    EXPECT_NE(parse_bad("redis://").find("host"), std::string::npos);
    EXPECT_NE(parse_bad("redis://:6379").find("host"), std::string::npos);
    EXPECT_NE(parse_bad("redis://u:p@/0").find("host"), std::string::npos);
    EXPECT_NE(parse_bad("redis://[]:6379").find("host"), std::string::npos);
}

TEST(ParseRedisUrl, BadPorts) {
    EXPECT_NE(parse_bad("redis://h:0").find("port \"0\""), std::string::npos);
    EXPECT_NE(parse_bad("redis://h:65536").find("port \"65536\""), std::string::npos);
    EXPECT_NE(parse_bad("redis://h:abc").find("port \"abc\""), std::string::npos);
    EXPECT_NE(parse_bad("redis://h:-1").find("port"), std::string::npos);
    EXPECT_NE(parse_bad("redis://h:99999999999999999999").find("port"), std::string::npos);
    EXPECT_NE(parse_bad("redis://h:63 79").find("port"), std::string::npos);
}

TEST(ParseRedisUrl, EmptyPort) {
    EXPECT_NE(parse_bad("redis://h:").find("empty port"), std::string::npos);
    EXPECT_NE(parse_bad("redis://h:/1").find("empty port"), std::string::npos);
    EXPECT_NE(parse_bad("redis://[::1]:").find("empty port"), std::string::npos);
}

TEST(ParseRedisUrl, BadDatabase) {
    EXPECT_NE(parse_bad("redis://h/-1").find("database \"-1\""), std::string::npos);
    EXPECT_NE(parse_bad("redis://h/x").find("database \"x\""), std::string::npos);
    EXPECT_NE(parse_bad("redis://h:6379/1/2").find("database"), std::string::npos);
}

TEST(ParseRedisUrl, UnclosedBracket) {
    EXPECT_NE(parse_bad("redis://[::1:6379").find("unclosed '['"), std::string::npos);
}

TEST(ParseRedisUrl, JunkAfterBracket) {
    EXPECT_NE(parse_bad("redis://[::1]6379").find("']'"), std::string::npos);
}

TEST(ParseRedisUrl, FailureResetsEndpoint) {
    std::error_code ec;
    const auto ep = parse_redis_url("redis://u:pw@h:0", ec);
    ASSERT_EQ(ec, dlock::errc::invalid_argument);
    EXPECT_TRUE(ep.host.empty());
    EXPECT_TRUE(ep.password.empty());
    EXPECT_FALSE(ep.has_password);
}

TEST(ParseRedisUrl, SuccessClearsPreviousError) {
    std::error_code ec;
    (void)parse_redis_url("nope", ec);
    ASSERT_TRUE(ec);
    (void)parse_redis_url("redis://h", ec);
    EXPECT_FALSE(ec);
}

TEST(RedisEndpointDescribe, NeverContainsThePassword) {
    for (const auto* url : {"redis://alice:hunter2pw@h:6380/1", "redis://hunter2pw@h",
                            "rediss://:hunter2pw@[::1]:7000", "redis://u:hunter2%40pw@h"}) {
        const auto ep = parse_ok(url);
        ASSERT_TRUE(ep.has_password) << url;
        const auto d = ep.describe();
        EXPECT_EQ(d.find("hunter2"), std::string::npos) << url << " -> " << d;
        EXPECT_EQ(d.find('@'), std::string::npos) << url << " -> " << d;
        EXPECT_FALSE(d.empty());
    }
}

// Passwords holding the characters that end a URL's parts ('/', '?', '#', '@', ':'), unencoded.
// Whatever the parser makes of such a URL, no error message, redacted URL or description may
// contain the password or any 4-character piece of it.
namespace leak {

const std::vector<std::string> passwords = {
    "S3cr/etP4",   "S3cr?etP4",
    "S3cr#etP4",   "S3cr@etP4",
    "S3cr:etP4",   "/S3cr",
    "S3cr/",       "S3cr@",
    "@S3cr",       "?S3cr",
    "#S3cr",       "S3cr//@@",
    "S3cr://etP4", "S3cr/etP4?ssW0#rdX9@kL8m:Zq7w",
};

// The pieces of `password` between the delimiters, 4 characters or longer.
std::vector<std::string> pieces(const std::string& password) {
    std::vector<std::string> out{password};
    std::string piece;
    for (const char c : password + "/") {
        if (std::string_view("/?#@:").find(c) == std::string_view::npos) {
            piece += c;
            continue;
        }
        if (piece.size() >= 4) out.push_back(piece);
        piece.clear();
    }
    return out;
}

// Every URL spelling of `password`: with a user, with an empty user, and alone (if it has no
// ':', which would make its head a user name); under several schemes and with valid and invalid
// host, port and path parts after it.
std::vector<std::string> urls(const std::string& password) {
    std::vector<std::string> userinfos = {"alice:" + password, ":" + password};
    if (password.find(':') == std::string::npos) userinfos.push_back(password);
    std::vector<std::string> out;
    for (const char* scheme : {"redis://", "rediss://", "unix://", "http://", "", "zk://"}) {
        for (const auto& userinfo : userinfos) {
            for (const char* tail : {"@h", "@h:6380/2", "@h:0", "@h:99999", "@/0", "@h/x", "@[::1",
                                     "@h:6379?x=1", "@h#f", "@/tmp/s.sock", "@a:1,b:2/base"}) {
                out.push_back(scheme + userinfo + tail);
            }
        }
    }
    return out;
}

void expect_hidden(const std::string& password, const std::string& url, const std::string& text,
                   const char* what) {
    for (const auto& piece : pieces(password)) {
        EXPECT_EQ(text.find(piece), std::string::npos)
            << what << " of " << url << " shows \"" << piece << "\": " << text;
    }
}

}  // namespace leak

TEST(RedactUrl, PasswordsWithUrlDelimitersNeverShow) {
    for (const auto& password : leak::passwords) {
        for (const auto& url : leak::urls(password)) {
            leak::expect_hidden(password, url, dlock::detail::redact_url(url), "redact_url");
            leak::expect_hidden(password, url, dlock::redis::redact_url(url),
                                "dlock::redis::redact_url");
            std::error_code ec;
            const auto ep = parse_redis_url(url, ec);
            if (ec) {
                leak::expect_hidden(password, url, dlock::detail::message_for(ec),
                                    "the error message");
                leak::expect_hidden(password, url, ec.message(), "ec.message()");
            } else {
                // unix:// reads its user-info as every scheme does: "unix://:S3cr@/tmp/s.sock".
                leak::expect_hidden(password, url, ep.describe(), "describe()");
                EXPECT_EQ(ep.password.empty(), false) << url;
            }
        }
    }
}

TEST(RedactUrl, KeepsWhatIsNotSecret) {
    EXPECT_EQ(dlock::detail::redact_url("redis://alice:pw@h:1/2"), "redis://alice:***@h:1/2");
    EXPECT_EQ(dlock::detail::redact_url("redis://pw@h"), "redis://***@h");
    EXPECT_EQ(dlock::detail::redact_url("redis://:pw@h"), "redis://:***@h");
    EXPECT_EQ(dlock::detail::redact_url("redis://h:1/2"), "redis://h:1/2");
    EXPECT_EQ(dlock::detail::redact_url("unix:///tmp/s.sock?db=1"), "unix:///tmp/s.sock?db=1");
    // The secret runs to the last '@', whatever comes between.
    EXPECT_EQ(dlock::detail::redact_url("redis://alice:p/w@y@h/0"), "redis://alice:***@h/0");
    // With a '?' or '#' before it, the '@' may lie in a query value: the rest is hidden too.
    EXPECT_EQ(dlock::detail::redact_url("redis://alice:p/w?x@y@h/0"), "redis://alice:***@***");
    // A user name with a character that cannot be in one is no user name: all of it is hidden.
    EXPECT_EQ(dlock::detail::redact_url("redis://p/w:x@h"), "redis://***@h");
    EXPECT_EQ(dlock::detail::redact_url("alice:pw@h:1"), "alice:***@h:1");
    EXPECT_EQ(dlock::detail::redact_url("pw://x@h"), "pw://***@h");
    EXPECT_EQ(dlock::detail::redact_url("p w://x@h"), "***@h");
}

TEST(ParseRedisUrl, UnencodedSlashQueryOrHashInPasswordIsRejected) {
    for (const char* url :
         {"redis://u:pa/ss@h", "redis://u:pa?ss@h:1/0", "rediss://:pa#ss@h", "redis://pa/ss@h"}) {
        std::error_code ec;
        (void)parse_redis_url(url, ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << url;
        const auto message = dlock::detail::message_for(ec);
        EXPECT_NE(message.find("unencoded"), std::string::npos) << message;
        EXPECT_EQ(message.find("pa/"), std::string::npos) << message;
        EXPECT_EQ(message.find("ss@"), std::string::npos) << message;
        EXPECT_EQ(message.find(":pa"), std::string::npos) << message;
    }
    // Percent-encoded, they are fine.
    EXPECT_EQ(parse_ok("redis://u:pa%2Fss%3F%23@h").password, "pa/ss?#");
}

TEST(RedactUrl, QueryValuesThatCouldBeCredentialsNeverShow) {
    // Only db, user and username are shown; every other value could be a credential.
    EXPECT_EQ(dlock::detail::redact_url("redis://h:1/0?password=S3cr"),
              "redis://h:1/0?password=***");
    EXPECT_EQ(dlock::detail::redact_url("unix:///s.sock?db=0&password=S3cr&user=al"),
              "unix:///s.sock?db=0&password=***&user=al");
    EXPECT_EQ(dlock::detail::redact_url("redis://h?PassWord=S3cr&token=T0k&auth=A&x=1"),
              "redis://h?PassWord=***&token=***&auth=***&x=***");
    EXPECT_EQ(dlock::detail::redact_url("redis://h?S3cr"), "redis://h?***");
    EXPECT_EQ(dlock::detail::redact_url("redis://h/0#S3cr"), "redis://h/0#***");
    EXPECT_EQ(dlock::detail::redact_url("redlock://a:1,b:2?password=S3cr"),
              "redlock://a:1,b:2?password=***");
    EXPECT_EQ(dlock::detail::redact_url("zk://h:1/b?digest=u:S3cr"), "zk://h:1/b?digest=***");
    // An '@' in a query value: the user-info reading takes it, and all after it is hidden.
    EXPECT_EQ(dlock::detail::redact_url("redis://h:1/0?password=S3@cr"), "redis://h:***@***");
    // Control characters are written %XX: a quoted URL is one printable line.
    EXPECT_EQ(dlock::detail::redact_url("redis://h\n\x1b[31m:1"), "redis://h%0A%1B[31m:1");
    for (const char* url : {"redis://h:1/0?password=S3cr", "redis://h?a=1&password=S3cr#S3cr",
                            "unix://:S3cr@/s.sock?password=S3cr", "redis://h?S3cr&db=1"}) {
        const std::string u = url;
        std::string blanked = u;
        for (const auto& [offset, length] : dlock::detail::secret_spans(u))
            blanked.replace(offset, length, std::string(length, '*'));
        EXPECT_EQ(blanked.find("S3cr"), std::string::npos) << url << " -> " << blanked;
    }
}

TEST(ParseRedisUrl, QueryCredentialsAndDatabase) {
    auto ep = parse_ok("redis://h:1/2?password=p%40w");
    EXPECT_EQ(ep.db, 2);
    EXPECT_TRUE(ep.has_password);
    EXPECT_EQ(ep.password, "p@w");
    ep = parse_ok("redis://h?db=3&user=alice&password=pw");
    EXPECT_EQ(ep.db, 3);
    EXPECT_EQ(ep.user, "alice");
    EXPECT_EQ(ep.password, "pw");
    ep = parse_ok("redis://alice:@h?password=pw");  // a user name, its password in the query
    EXPECT_EQ(ep.user, "alice");
    EXPECT_EQ(ep.password, "pw");
    ep = parse_ok("unix:///tmp/r.sock?db=1&username=bob&PASSWORD=pw");
    EXPECT_EQ(ep.path, "/tmp/r.sock");
    EXPECT_EQ(ep.user, "bob");
    EXPECT_EQ(ep.password, "pw");
    for (const char* url :
         {"redis://:a@h?password=b", "redis://h/1?db=2", "redis://h?pw", "redis://h?token=x",
          "redis://h?password=%zz", "unix:///s?password=a&password=b", "redis://u:p@h?user=v"}) {
        std::error_code ec;
        (void)parse_redis_url(url, ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << url;
        const auto message = dlock::detail::message_for(ec);
        EXPECT_NE(message.find("query options: db=N, user=NAME, password=SECRET"),
                  std::string::npos)
            << url << ": " << message;
        for (const char* secret : {":a@", "=b", "pw", "=x", "%zz"})
            EXPECT_EQ(message.find(secret), std::string::npos) << url << ": " << message;
    }
}

TEST(ParseRedisUrl, UnixSocketTakesCredentials) {
    auto ep = parse_ok("unix://alice:pw@/var/run/redis.sock?db=2");
    EXPECT_EQ(ep.kind, transport::unix_socket);
    EXPECT_EQ(ep.path, "/var/run/redis.sock");
    EXPECT_EQ(ep.user, "alice");
    EXPECT_EQ(ep.password, "pw");
    EXPECT_EQ(ep.db, 2);
    ep = parse_ok("unix://pw@/s.sock");  // a lone "secret@" is a password, as everywhere
    EXPECT_EQ(ep.password, "pw");
    EXPECT_TRUE(ep.user.empty());
    EXPECT_EQ(parse_ok("unix:///tmp/a%40b.sock").path, "/tmp/a@b.sock");
}

TEST(ParseRedisUrl, SchemesAreCaseInsensitive) {
    EXPECT_EQ(parse_ok("REDIS://h:7").port, 7);
    EXPECT_EQ(parse_ok("Unix:///s.sock").kind, transport::unix_socket);
    EXPECT_EQ(parse_ok("RedisS://h").kind, transport::tls);
}

}  // namespace

// Sentinel URLs (src/redis/sentinel.hpp): the sentinels, the master's name, its credentials and
// database, and the Sentinel-only query options.
namespace sentinel_urls {

using dlock::redis::detail::parse_sentinel_url;
using dlock::redis::detail::sentinel_settings;

sentinel_settings sentinel_ok(std::string_view url) {
    std::error_code ec;
    auto s = parse_sentinel_url(url, ec);
    EXPECT_FALSE(ec) << url << ": " << dlock::detail::message_for(ec);
    return s;
}

std::string sentinel_bad(std::string_view url) {
    std::error_code ec;
    (void)parse_sentinel_url(url, ec);
    EXPECT_EQ(ec, dlock::errc::invalid_argument) << url;
    return dlock::detail::message_for(ec);
}

TEST(SentinelUrl, SentinelsMasterCredentialsAndDatabase) {
    const auto s = sentinel_ok("redis-sentinel://app:pw%40x@a:1,[::1]:2,c/mymaster/3");
    ASSERT_EQ(s.sentinels.size(), 3u);
    EXPECT_EQ(s.sentinels[0].describe(), "a:1");
    EXPECT_EQ(s.sentinels[1].describe(), "[::1]:2");
    EXPECT_EQ(s.sentinels[2].describe(), "c:26379");  // the sentinels' default port
    EXPECT_FALSE(s.sentinels[0].has_password) << "the sentinels get AUTH only when asked";
    EXPECT_EQ(s.master_name, "mymaster");
    EXPECT_EQ(s.master.user, "app");
    EXPECT_EQ(s.master.password, "pw@x");
    EXPECT_EQ(s.master.db, 3);
    EXPECT_FALSE(s.tls);
    EXPECT_EQ(s.wait_replicas, 0u);

    const auto plus = sentinel_ok(
        "REDIS+SENTINEL://h/m%2Fx?db=2&password=p&sentinel_password=sp&sentinel_user=su&"
        "wait_replicas=2&wait_timeout=50ms&failover_wait=3s");
    EXPECT_EQ(plus.master_name, "m/x");
    EXPECT_EQ(plus.master.db, 2);
    EXPECT_EQ(plus.master.password, "p");
    EXPECT_EQ(plus.sentinels[0].user, "su");
    EXPECT_EQ(plus.sentinels[0].password, "sp");
    EXPECT_EQ(plus.wait_replicas, 2u);
    EXPECT_EQ(plus.wait_timeout, std::chrono::milliseconds(50));
    EXPECT_EQ(plus.failover_wait, std::chrono::seconds(3));
    EXPECT_TRUE(sentinel_ok("rediss-sentinel://h:1/m").tls);
}

TEST(SentinelUrl, RedissSentinelTakesTheTlsOptionsForTheSentinelsAndTheMaster) {
    using transport = dlock::detail::redis_endpoint::transport;
    const auto s = sentinel_ok(
        "rediss-sentinel://h:1,h:2/m?tls_ca=/etc/ca.pem&tls_cert=/c.pem&tls_key=/c.key&"
        "tls_server_name=db.example&wait_replicas=1&wait_timeout=1s");
    EXPECT_TRUE(s.tls);
    EXPECT_EQ(s.master.kind, transport::tls);
    EXPECT_EQ(s.master.tls.ca_file, "/etc/ca.pem");
    EXPECT_EQ(s.master.tls.server_name, "db.example");
    ASSERT_EQ(s.sentinels.size(), 2u);
    for (const auto& sentinel : s.sentinels) {
        EXPECT_EQ(sentinel.kind, transport::tls);
        EXPECT_EQ(sentinel.tls.ca_file, "/etc/ca.pem");
        EXPECT_EQ(sentinel.tls.cert_file, "/c.pem");
        EXPECT_EQ(sentinel.tls.key_file, "/c.key");
    }
    EXPECT_TRUE(
        sentinel_ok("rediss-sentinel://h/m?tls_insecure=1").sentinels[0].tls.insecure_skip_verify);
    // redis-sentinel:// is plain TCP: tls_* options are refused, as on redis://.
    EXPECT_EQ(sentinel_ok("redis-sentinel://h/m").sentinels[0].kind, transport::tcp);
    EXPECT_NE(sentinel_bad("redis-sentinel://h/m?tls_ca=/etc/ca.pem").find("tls_ca"),
              std::string::npos);
    EXPECT_NE(sentinel_bad("rediss-sentinel://h/m?tls_cert=/c.pem").find("tls_cert and tls_key"),
              std::string::npos);
}

TEST(SentinelUrl, MistakesAreNamedAndNeverShowThePassword) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"redis-sentinel://u:S3cret@h:1", "missing the master's name"},
        {"redis-sentinel://u:S3cret@h:1/", "missing the master's name"},
        {"redis-sentinel://u:S3cret@/m", "no sentinel given"},
        {"redis-sentinel://u:S3cret@h:1,,h:2/m", "an empty sentinel address"},
        {"redis-sentinel://u:S3cret@h:1,h:1/m", "listed more than once"},
        {"redis-sentinel://u:S3cret@h:99999/m", "expected host[:port]"},
        {"redis-sentinel://u:S3cret@h/m/x", "database"},
        {"redis-sentinel://u:S3cret@h/m?wait_replicas=2", "wait_replicas needs wait_timeout"},
        {"redis-sentinel://u:S3cret@h/m?wait_replicas=x&wait_timeout=1s", "wait_replicas=x"},
        {"redis-sentinel://u:S3cret@h/m?wait_replicas=1&wait_timeout=0", "wait_timeout"},
        {"redis-sentinel://u:S3cret@h/m?wait_aof=1", "wait_aof needs wait_replicas"},
        {"redis-sentinel://u:S3cret@h/m?nope=1", "unknown query option \"nope\""},
        {"redis-sentinel://u:S3cret@h/m#f", "fragment"},
    };
    for (const auto& [url, want] : cases) {
        const auto message = sentinel_bad(url);
        EXPECT_NE(message.find(want), std::string::npos) << url << " -> " << message;
        EXPECT_EQ(message.find("S3cret"), std::string::npos) << message;
    }
}

}  // namespace sentinel_urls
