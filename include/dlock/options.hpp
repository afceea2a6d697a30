// Options shared by every backend: `lock_options` (per lock: lease, wait, renewal, retries) and
// the `dlock::forever` duration. Aggregates with a default on every field, set with designated
// initializers; fields are only ever appended. Values are validated by the call that takes them
// (errc::invalid_argument naming the field). Plain values: copy them freely between threads.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>

namespace dlock {

using namespace std::chrono_literals;

/// "No bound". Never use 0 for that: 0 means "do not wait at all".
inline constexpr std::chrono::milliseconds forever = std::chrono::milliseconds::max();

/// The shortest lease accepted: below it the client's own drift margin (lease/100 + 2 ms) and a
/// loopback round trip eat the whole lease.
inline constexpr std::chrono::milliseconds min_lease{10};

/// The longest lease accepted. Longer leases turn a crashed holder into a day-long outage; use
/// renewal instead.
inline constexpr std::chrono::milliseconds max_lease = std::chrono::hours(24);

struct lock_options {
    /// Server-side lifetime of a grant. A holder that stops renewing loses the lock this long after
    /// its last successful renewal. Must be in [min_lease, max_lease].
    std::chrono::milliseconds lease = 30s;

    /// How long acquire() may block while someone else holds the lock. 0 = one attempt;
    /// `forever` = until granted or the backend fails. Negative counts as 0. dlock::mutex ignores
    /// it: lock(), try_lock() and try_lock_for/until carry their own bound.
    std::chrono::milliseconds wait = forever;

    /// Keep the lease alive from the client's watchdog while the grant is held (Redisson's
    /// watchdog). false = a fixed lease that simply expires.
    bool renew = true;

    /// Renewal period; unset = lease / 3. Must be > 0 and shorter than the lease minus the drift
    /// margin (lease/100 + 2 ms), or the lease would run out before its first renewal.
    std::optional<std::chrono::milliseconds> renew_every{};

    /// Cap on the total holding time: renewal stops so that the lease ends this long after the
    /// grant, however long the holder keeps it. `forever` = no cap.
    std::chrono::milliseconds max_hold = forever;

    /// Attempts limit while contended (a Redlock client's "retry count"); unset = no limit.
    /// Reaching it is errc::attempts_exhausted. Must be >= 1.
    std::optional<unsigned> max_attempts{};

    /// Called once, from the client's background thread, when the grant is lost (renewal failed
    /// until the lease deadline, the key is gone or holds another token). Runs with no dlock lock
    /// held; an exception escaping it goes to the client's error handler.
    std::function<void(std::error_code why)> on_lost{};

    /// Stops a wait early: once stop is requested, acquire gives up with errc::canceled (also
    /// from lock() and try_lock_for, which throw it). Checked between attempts and while
    /// sleeping, so an attempt in flight finishes first and nothing is left held.
    std::stop_token cancel{};
};

/// TLS settings for `rediss://` servers and `rediss-sentinel://` sets (docs/tls.md). The server's
/// certificate is verified by default: against the system's trust store (OpenSSL's default
/// paths, so SSL_CERT_FILE and SSL_CERT_DIR apply) unless a CA file or directory is given, and
/// for the host name of the URL (or `server_name`). TLS 1.2 at least. Paths are read when the
/// client is constructed; a file that cannot be loaded is errc::invalid_argument naming it. Setting
/// any field for a URL that is not rediss:// is errc::invalid_argument. A URL's own tls_* query
/// options take precedence.
struct tls_options {
    /// PEM file of the CA certificates to trust instead of the system's trust store.
    std::string ca_file{};
    /// Directory of hashed CA certificates (c_rehash) to trust instead of the system's.
    std::string ca_dir{};
    /// PEM client certificate (chain) for mutual TLS; needs `key_file`.
    std::string cert_file{};
    /// PEM private key of `cert_file` (unencrypted).
    std::string key_file{};
    /// The name the server's certificate must carry (and SNI), instead of the URL's host: for a
    /// server reached by an address its certificate does not name.
    std::string server_name{};
    /// DANGEROUS: accept any certificate from anyone, so anyone on the path can read and change
    /// every command, password included. For tests against throw-away servers only.
    bool insecure_skip_verify = false;
};

}  // namespace dlock
