// dlock::connect(): the lock service a URL names, whatever its backend (target dlock::dlock):
//
//   redis://[user[:password]@]host[:port][/db]      one Redis server (dlock::redis::client)
//   unix:///path/to/socket[?db=N]                    one Redis server on a Unix socket
//   rediss://[user[:password]@]host[:port][/db]     one Redis server over TLS (docs/tls.md)
//   redlock://[user[:password]@]h1:p1,h2:p2,...[/db] Redlock over N independent Redis servers
//                                                    (dlock::redlock::client); the user-info
//                                                    and db apply to every server
//   zk://h1:p1[,h2:p2...][/base]                     a ZooKeeper ensemble (dlock::zk::client)
//
// A scheme of a backend this build lacks (DLOCK_WITH_ZOOKEEPER=OFF, ...; see <dlock/config.hpp>),
// or of a service dlock has no backend for (etcd://, Redis Sentinel), is errc::unsupported with a
// message naming the scheme. Messages quote URLs with the password replaced by "***".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/options.hpp>
#include <dlock/event.hpp>

namespace dlock {

/// The client options every backend shares. Settings only one backend has (Redis command_timeout,
/// Redlock drift, ZooKeeper session_timeout, ...) keep their defaults here; construct that
/// backend's client (e.g. dlock::redis::client_options) to set them.
struct connect_options {
    /// Bound on establishing a connection or session. Unset: the backend's default (Redis and
    /// Redlock 1 s, ZooKeeper 2 s). Must be > 0.
    std::optional<std::chrono::milliseconds> connect_timeout{};
    /// Redis and Redlock: every key is `<key_prefix>:{<name>}...` (default "dlock"). ZooKeeper
    /// takes its base path from the URL instead, so setting this for zk:// is
    /// errc::invalid_argument.
    std::optional<std::string> key_prefix{};
    /// The password when it is not in the URL (read from a file or the environment, so that it is
    /// never in a command line), put into the URL's user-info as by dlock::url_with_password: a
    /// user name in the URL is kept ("redis://alice:@host"). For redis://, rediss://,
    /// redlock://, etcd:// and etcds:// ("etcd://root:@host": etcd needs the user name in the
    /// URL) only; another scheme, or a URL with a password already, is errc::invalid_argument.
    std::optional<std::string> password{};
    /// Lock events (acquired, renewed, released, lost, ...). Silent when unset.
    dlock::observer observer{};
    /// Failures with no caller to throw to (a failed release in a destructor, a renewal error, an
    /// exception escaping a callback). Unset: one line on stderr.
    std::function<void(std::error_code, std::string_view what)> error_handler{};
    /// Redis and Redlock: bound on one command round trip (redis::client_options and
    /// redlock::client_options::command_timeout). Unset: the backend's default (1 s). Must be > 0.
    /// ZooKeeper has no such bound (its session timeout governs), so setting it for zk:// is
    /// errc::invalid_argument.
    std::optional<std::chrono::milliseconds> command_timeout{};
    /// TLS settings (CA, client certificate, server name) for a rediss:// URL (docs/tls.md), or
    /// an etcds:// URL (docs/etcd.md). Setting it for any other URL is errc::invalid_argument.
    std::optional<dlock::tls_options> tls{};
    /// Redlock: how long each server has to answer one vote (redlock::client_options::
    /// node_timeout). Unset: the lease / 200, clamped to [5 ms, 50 ms] (docs/redlock.md): raise it
    /// for servers farther apart than that, or on a loaded host. Must be > 0; setting it for any
    /// other URL is errc::invalid_argument.
    std::optional<std::chrono::milliseconds> node_timeout{};
};

/// Which backend a URL names.
enum class service_kind : std::uint8_t {
    redis,      ///< redis://, rediss://, unix://
    redlock,    ///< redlock://
    zookeeper,  ///< zk://
    etcd,       ///< etcd://, etcds://
};

const char* to_string(service_kind kind) noexcept;

/// What a URL names, before anything is connected.
struct service_url {
    service_kind kind = service_kind::redis;
    /// redis and zookeeper: the URL itself. redlock: one redis:// URL per server, each with the
    /// redlock URL's user-info and db (a quorum is servers.size() / 2 + 1).
    std::vector<std::string> servers{};
};

/// Reads `url` without connecting: its scheme, and for redlock:// its list of servers. Throws
/// dlock::error: errc::unsupported for a scheme this build has no backend for (naming the
/// scheme), errc::invalid_argument for a URL without a scheme, an unknown scheme or a malformed
/// redlock:// list (empty entry, a server listed twice). The rest of the URL is checked by the
/// backend's client (in connect()).
service_url parse_service_url(std::string_view url);

/// The lock service `url` names (see the top of this file), with `options`. Validates everything
/// and connects lazily, on first use, as the backend's client does. Throws dlock::error:
/// errc::invalid_argument for a malformed URL or option, errc::unsupported for a scheme this build
/// does not have. The backend is thread-safe; share it by reference, and keep it alive while
/// locks use it. To reach backend-specific members, dynamic_cast to the client type
/// (dlock::redis::client, dlock::redlock::client, dlock::zk::client) service_kind names.
std::unique_ptr<backend> connect(std::string_view url, connect_options options = {});

}  // namespace dlock
