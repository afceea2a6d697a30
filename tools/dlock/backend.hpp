// Choosing and reaching the lock service from a URL, and turning dlock::error into the tool's
// exit statuses and one-line messages.
//
//   redis://[user:password@]host[:port][/db][?db=N&user=U&password=P]   one Redis server
//   rediss://... (TLS; --tls-ca, --tls-cert, --tls-key, --tls-insecure; docs/tls.md)  one over TLS
//   unix://[user:password@]/path[?db=N&user=U&password=P]             one Redis server
//   redlock://[user:password@]host:port,host:port,...[/db][?...]        a Redlock quorum
//   zk://host:port[,host:port...][/base]                              a ZooKeeper ensemble
//   etcd://host:port[,host:port...][/prefix]                          an etcd cluster
#pragma once

#include <dlock/backend.hpp>
#include <dlock/connect.hpp>
#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#include <dlock/url.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cli.hpp"

namespace dlock::cli {

/// The URL used when --url is not given: $DLOCK_URL if set and not empty, else the local default.
std::string default_url();

/// `url` with any password replaced by "***", for messages and `dlock status` output.
using dlock::redact_url;

/// Whether `url` carries a secret: a password in its user-info or a query value that could be a
/// credential (dlock::url_secrets).
bool has_password(std::string_view url);

/// Where the secrets of `url` are (offset, length), as dlock::url_secrets finds them: to
/// overwrite them in place. A lone "secret@" is a password.
std::vector<std::pair<std::size_t, std::size_t>> secret_spans(std::string_view url);

/// `url` with `password` (percent-encoded) put into its user-info, as dlock::url_with_password
/// does. redis://, rediss://, unix:// and redlock:// URLs take one; a user name is written
/// `redis://alice:@host` (a lone `redis://secret@host` is a password). Throws cli_error(usage)
/// for other schemes, or if the URL has a password already (user-info or ?password=).
std::string with_password(std::string_view url, std::string_view password);

/// Remembers the secrets of `url` (secret_spans), as written and percent-decoded, for
/// scrub_secrets(). Call it from the main thread, before other threads start.
void remember_secrets_of(std::string_view url);
/// Remembers `secret` itself (a password read from a file or the environment).
void remember_secret(std::string_view secret);

/// The last line of defence for a message about to be printed: every remembered secret in `text`
/// replaced by "***", and control characters written as \xNN (so a message is one printable
/// line, whatever the input quoted in it held).
std::string safe_message(std::string text);

/// What a --url names, before anything is connected.
struct service_url {
    bool redlock = false;
    std::vector<std::string> servers{};  ///< one redis:// (or unix://) URL per server
    bool zk = false;                     ///< servers holds the one zk:// URL
    bool etcd = false;                   ///< servers holds the one etcd:// URL
};

/// Splits `url` into its servers (dlock::parse_service_url). Throws cli_error: unavailable for
/// the schemes of backends this build does not have (zk:// or etcd:// without them), usage for
/// a malformed URL or redlock:// list.
service_url parse_service_url(std::string_view url);

/// A redlock:// URL of 1 or 2 servers works, but a grant needs every one of them: no server may
/// fail. Returns the one-line warning to print for such a URL (without "dlock: "), else empty.
/// Throws like parse_service_url for a malformed URL.
std::string fault_tolerance_warning(std::string_view url);

/// Passed to the lock client: lock events, and failures nobody can be thrown to.
struct service_callbacks {
    dlock::observer observer{};
    std::function<void(std::error_code, std::string_view)> error_handler{};
};

/// The lock service a --url names (dlock::connect): one Redis server, a Redlock quorum or a
/// ZooKeeper ensemble, plus a plain client per Redis server for inspection (`dlock status`, the
/// waiting line). Thread-safe like its clients, except servers(), which creates the inspection
/// clients on first use: call it from one thread.
class lock_service {
public:
    /// Validates the URL and every option of `server` (see parse_service_url and
    /// connect_options; then cli_error with the client's message: usage for a malformed URL or
    /// key prefix, a command timeout on zk:// or a node timeout off redlock://, unavailable for
    /// etcd://). Every command passes all its server options here, so none is dropped. Connects
    /// lazily; starts the clients' background threads.
    explicit lock_service(const server_options& server, service_callbacks cb = {});

    dlock::backend& backend() noexcept { return *backend_; }
    bool is_redlock() const noexcept { return kind_ == dlock::service_kind::redlock; }
    bool is_zk() const noexcept { return kind_ == dlock::service_kind::zookeeper; }
    bool is_etcd() const noexcept { return kind_ == dlock::service_kind::etcd; }
    /// The etcd key `lease` holds (etcdctl lock's ETCD_LOCK_KEY); empty on other services.
    std::string etcd_key(const dlock::lease& lease) const;
    /// Servers needed for a grant: N/2+1 for Redlock, 1 for a single server.
    std::size_t quorum() const noexcept;
    const std::vector<std::string>& server_urls() const noexcept { return urls_; }
    /// One plain client per server (for a single server, the lock client itself); none for zk://.
    std::vector<dlock::redis::client*> servers();
    /// The first of servers(): where `dlock demo` keeps its stock. zk:// has no Redis server:
    /// cli_error(unavailable) saying that `what` needs one (never an empty-list dereference).
    dlock::redis::client& first_redis_server(std::string_view what);

private:
    std::string key_prefix_;
    std::optional<std::chrono::milliseconds> connect_timeout_;  // for the inspection clients
    std::optional<std::chrono::milliseconds> command_timeout_;
    std::optional<dlock::tls_options> tls_;  // for the inspection clients
    dlock::service_kind kind_ = dlock::service_kind::redis;
    std::vector<std::string> urls_;
    std::unique_ptr<dlock::backend> backend_;
    std::vector<std::unique_ptr<dlock::redis::client>> inspectors_;  // redlock only, on first use
};

/// The exit status for a dlock error code.
int status_for(std::error_code ec);

/// A cli_error for `e` with a message that says what failed in words, then the library's detail
/// (quoted as the library words it: the CLI does not rewrite library messages).
cli_error to_cli_error(const dlock::error& e, std::string_view url);

}  // namespace dlock::cli
