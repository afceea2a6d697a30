// dlock::connect(): the one place that maps a URL's scheme to a backend's client. Compiled into
// dlock::dlock with the backends this build has (<dlock/config.hpp>).
#include <dlock/connect.hpp>
#include <dlock/error.hpp>
#include <dlock/url.hpp>

#include <algorithm>
#include <utility>

#include "core/url.hpp"

#if DLOCK_HAS_REDIS
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#endif
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#if DLOCK_HAS_ETCD
#include <dlock/etcd/client.hpp>
#endif

namespace dlock {
namespace {

// The URL forms this build accepts, for messages.
std::string accepted_forms() {
    std::string out;
#if DLOCK_HAS_REDIS
    out +=
        "redis://host[:port][/db], unix:///path, redlock://host:port,host:port,host:port, "
        "redis-sentinel://host:port,host:port/master";
#endif
#if DLOCK_HAS_ZOOKEEPER
    if (!out.empty()) out += " or ";
    out += "zk://host:port[,host:port...][/base]";
#endif
#if DLOCK_HAS_ETCD
    if (!out.empty()) out += " or ";
    out += "etcd[s]://host:port[,host:port...][/prefix]";
#endif
    return out;
}

[[noreturn]] void fail(errc code, std::string_view url, std::string_view why) {
    throw error(code, "URL \"" + detail::redact_url(url) + "\": " + std::string(why));
}

/// An optional duration of connect_options, when set, is > 0.
void require_positive(const std::optional<std::chrono::milliseconds>& value,
                      std::string_view name) {
    if (value && value->count() <= 0) {
        throw error(errc::invalid_argument, std::string(name) + " must be > 0, got " +
                                                std::to_string(value->count()) + " ms");
    }
}

// A scheme dlock knows: the component that serves it and whether this build has it.
struct known_scheme {
    std::string_view scheme;
    std::string_view component;  ///< what serves it, for messages
    bool built;
    service_kind kind;
};

constexpr std::string_view redis_component = "the Redis backend (DLOCK_WITH_REDIS)";
constexpr std::string_view zk_component = "the ZooKeeper backend (DLOCK_WITH_ZOOKEEPER)";
constexpr std::string_view etcd_component = "the etcd backend (DLOCK_WITH_ETCD)";
constexpr known_scheme known_schemes[] = {
    {"redis", redis_component, DLOCK_HAS_REDIS != 0, service_kind::redis},
    {"rediss", redis_component, DLOCK_HAS_REDIS != 0, service_kind::redis},
    {"unix", redis_component, DLOCK_HAS_REDIS != 0, service_kind::redis},
    {"redlock", redis_component, DLOCK_HAS_REDIS != 0, service_kind::redlock},
    {"zk", zk_component, DLOCK_HAS_ZOOKEEPER != 0, service_kind::zookeeper},
    {"etcd", etcd_component, DLOCK_HAS_ETCD != 0, service_kind::etcd},
    {"etcds", etcd_component, DLOCK_HAS_ETCD != 0, service_kind::etcd},
    {"redis-sentinel", redis_component, DLOCK_HAS_REDIS != 0, service_kind::redis},
    {"redis+sentinel", redis_component, DLOCK_HAS_REDIS != 0, service_kind::redis},
    {"rediss-sentinel", redis_component, DLOCK_HAS_REDIS != 0, service_kind::redis},
};

// redlock://[userinfo@]h1:p1,h2:p2,...[/db][?query]: one redis:// URL per server, each with the
// userinfo, db and query. `url` has its scheme in lower case; `written` is what the user gave
// (quoted, redacted, in messages).
std::vector<std::string> split_redlock(std::string_view url, std::string_view written) {
    const auto bad = [&](std::string_view why) {
        fail(errc::invalid_argument, written,
             std::string(why) + " (expected redlock://host:port,host:port,host:port[/db])");
    };
    auto rest = url.substr(std::string_view("redlock://").size());
    // The userinfo ends at the last '@' (core/url.hpp), so that a password's unencoded '/' or '?'
    // is never taken for a path or a query (and quoted in a message).
    std::string_view userinfo;
    if (const auto span = detail::find_userinfo(url)) {
        userinfo = url.substr(span->begin, span->end + 1 - span->begin);  // with its '@'
        rest = url.substr(span->end + 1);
    }
    if (userinfo.find_first_of("/?#") != std::string_view::npos)
        bad("unencoded '/', '?' or '#' in the user or password (write them as %2F, %3F, %23)");
    if (rest.find('#') != std::string_view::npos) bad("a fragment (#...) is not allowed");
    const auto question = rest.find('?');
    const auto query =
        question == std::string_view::npos ? std::string_view{} : rest.substr(question);
    rest = rest.substr(0, question);
    if (rest.find("://") != std::string_view::npos) {
        bad("each server is host:port; a server URL (unix://, redis://...) cannot be listed");
    }
    const auto slash = rest.find('/');
    const auto path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
    auto hosts = rest.substr(0, slash);
    std::vector<std::string> servers;
    while (true) {
        const auto comma = hosts.find(',');
        const auto host = hosts.substr(0, comma);
        if (host.empty()) bad("empty server in the list");
        std::string server = "redis://";
        server += userinfo;
        server += host;
        server += path;
        server += query;
        // One server twice would count twice towards the quorum.
        if (std::find(servers.begin(), servers.end(), server) != servers.end())
            bad("server " + detail::printable(host) + " is listed twice");
        servers.push_back(std::move(server));
        if (comma == std::string_view::npos) break;
        hosts = hosts.substr(comma + 1);
    }
    return servers;
}

}  // namespace

const char* to_string(service_kind kind) noexcept {
    switch (kind) {
        case service_kind::redis: return "redis";
        case service_kind::redlock: return "redlock";
        case service_kind::zookeeper: return "zookeeper";
        case service_kind::etcd: return "etcd";
    }
    return "unknown";
}

service_url parse_service_url(std::string_view written) {
    // Schemes are case-insensitive (RFC 3986 3.1): "REDIS://" and "Redlock://" are accepted, and
    // the servers are named with the scheme in lower case.
    const std::string lowered = detail::lower_scheme(written);
    const std::string_view url = lowered;
    const auto scheme = detail::url_scheme(url);
    if (scheme.empty()) {
        // Not quoted as a scheme: in "user:password@host" the text before "://" may be secret.
        fail(errc::invalid_argument, written, "no scheme (expected " + accepted_forms() + ")");
    }
    const auto known = std::find_if(std::begin(known_schemes), std::end(known_schemes),
                                    [&](const known_scheme& k) { return k.scheme == scheme; });
    if (known == std::end(known_schemes)) {
        fail(errc::invalid_argument, written,
             "unknown scheme \"" + std::string(scheme) + "\" (expected " + accepted_forms() + ")");
    }
    if (!known->built) {
        throw error(errc::unsupported, std::string(scheme) + ":// URLs need " +
                                           std::string(known->component) +
                                           ", which this build of dlock does not have");
    }
    service_url out{.kind = known->kind};
    if (out.kind == service_kind::redlock) {
        out.servers = split_redlock(url, written);
    } else {
        out.servers.emplace_back(url);
    }
    return out;
}

std::unique_ptr<backend> connect(std::string_view url, connect_options options) {
    std::string full(url);
    if (options.password) {
        const std::string lowered = detail::lower_scheme(url);
        const auto scheme = detail::url_scheme(lowered);
        if (scheme != "redis" && scheme != "rediss" && scheme != "unix" && scheme != "redlock" &&
            scheme != "redis-sentinel" && scheme != "redis+sentinel" &&
            scheme != "rediss-sentinel" && scheme != "etcd" && scheme != "etcds") {
            fail(errc::invalid_argument, url,
                 "a separate password applies to redis://, rediss://, unix://, redlock://, "
                 "redis-sentinel://, etcd:// and etcds:// URLs only");
        }
        full = url_with_password(url, *options.password);
    }
    auto parsed = parse_service_url(full);
    require_positive(options.connect_timeout, "connect_timeout");
    require_positive(options.command_timeout, "command_timeout");
    require_positive(options.node_timeout, "node_timeout");
    if (options.node_timeout && parsed.kind != service_kind::redlock) {
        fail(errc::invalid_argument, full,
             "a node timeout applies to redlock:// only (each server's time to answer one vote)");
    }
    switch (parsed.kind) {
#if DLOCK_HAS_REDIS
        case service_kind::redis: {
            redis::client_options o{.url = std::move(parsed.servers.front()),
                                    .observer = std::move(options.observer),
                                    .error_handler = std::move(options.error_handler)};
            if (options.connect_timeout) o.connect_timeout = *options.connect_timeout;
            if (options.command_timeout) o.command_timeout = *options.command_timeout;
            if (options.key_prefix) o.key_prefix = std::move(*options.key_prefix);
            if (options.tls) o.tls = std::move(*options.tls);
            return std::make_unique<redis::client>(std::move(o));
        }
        case service_kind::redlock: {
            // redlock:// names host:port pairs: its servers speak TLS when TLS options are given
            // (connect_options::tls, even empty, or a tls_* query option), docs/tls.md.
            bool tls = options.tls.has_value();
            for (const auto& item : detail::query_items(detail::url_query(full)))
                tls = tls || item.key.starts_with("tls_");
            if (tls) {
                for (auto& server : parsed.servers) server.insert(5, "s");  // redis:// -> rediss://
            }
            redlock::client_options o{.urls = std::move(parsed.servers),
                                      .observer = std::move(options.observer),
                                      .error_handler = std::move(options.error_handler)};
            if (options.connect_timeout) o.connect_timeout = *options.connect_timeout;
            if (options.command_timeout) o.command_timeout = *options.command_timeout;
            if (options.node_timeout) o.node_timeout = *options.node_timeout;
            if (options.key_prefix) o.key_prefix = std::move(*options.key_prefix);
            if (options.tls) o.tls = std::move(*options.tls);
            return std::make_unique<redlock::client>(std::move(o));
        }
#endif
#if DLOCK_HAS_ZOOKEEPER
        case service_kind::zookeeper: {
            if (options.key_prefix) {
                fail(errc::invalid_argument, full,
                     "a key prefix applies to Redis and Redlock; a zk:// URL names its base path "
                     "instead (zk://host:port/base)");
            }
            if (options.command_timeout) {
                fail(errc::invalid_argument, full,
                     "a command timeout applies to Redis and Redlock; on ZooKeeper the session "
                     "timeout bounds every request");
            }
            zk::client_options o{.url = std::move(parsed.servers.front()),
                                 .observer = std::move(options.observer),
                                 .error_handler = std::move(options.error_handler)};
            if (options.connect_timeout) o.connect_timeout = *options.connect_timeout;
            return std::make_unique<zk::client>(std::move(o));
        }
#endif
#if DLOCK_HAS_ETCD
        case service_kind::etcd: {
            if (options.key_prefix) {
                fail(errc::invalid_argument, full,
                     "a key prefix applies to Redis and Redlock; an etcd:// URL names its key "
                     "prefix instead (etcd://host:port/prefix)");
            }
            etcd::client_options o{.url = std::move(parsed.servers.front()),
                                   .observer = std::move(options.observer),
                                   .error_handler = std::move(options.error_handler)};
            if (options.connect_timeout) o.connect_timeout = *options.connect_timeout;
            if (options.command_timeout) o.command_timeout = *options.command_timeout;
            if (options.tls) o.tls = std::move(*options.tls);
            return std::make_unique<etcd::client>(std::move(o));
        }
#endif
        default: break;
    }
    // parse_service_url() refuses the schemes of backends this build lacks.
    throw error(errc::unsupported,
                std::string(to_string(parsed.kind)) + " is not available in this build of dlock");
}

}  // namespace dlock
