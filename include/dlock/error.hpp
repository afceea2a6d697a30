// dlock's one error vocabulary: `dlock::errc`, its std::error_category, and the exception
// `dlock::error` (a std::system_error carrying an errc). Throwing calls have noexcept twins
// that take a `std::error_code&` last; both report the same codes. Backend detail (the server's
// reply, the node that failed) goes into the message, never into new types.
// Everything here is immutable and safe to use from any thread.
#pragma once

#include <string>
#include <system_error>

namespace dlock {

enum class errc {
    /// An argument or option is out of range; the message names the field and the value.
    invalid_argument = 1,
    /// The wait bound passed while another holder kept the lock. Contention, not a failure:
    /// try_lock_for/try_lock_until turn it into `false`.
    timeout,
    /// lock_options::max_attempts attempts were made while another holder kept the lock.
    attempts_exhausted,
    /// The lease can no longer be guaranteed: it expired, or the server holds another owner's
    /// token.
    lock_lost,
    /// The caller does not hold the lock it tried to use (e.g. fencing_token() of an unlocked
    /// mutex).
    not_owner,
    /// The server could not be reached: connection refused, reset or closed, host unknown.
    connection_failed,
    /// The server did not answer within connect_timeout / command_timeout.
    server_timeout,
    /// The server refused our credentials (AUTH), or demands credentials we do not have.
    auth_failed,
    /// The bytes from the server are not valid protocol (not a Redis server, or a broken one).
    protocol_error,
    /// A well-formed reply of a type the operation cannot accept (e.g. the lock key holds a list).
    unexpected_reply,
    /// The server answered with an error not covered above; the message carries it.
    server_error,
    /// The requested feature is not available in this build (e.g. rediss:// without TLS).
    unsupported,
    /// Fewer servers than a quorum answered (Redlock); the message names each failed server.
    /// Distinct from timeout: nobody was seen holding the lock.
    quorum_unreachable,
    /// The caller's stop token (lock_options::cancel) was triggered while waiting; nothing is held.
    canceled,
};

/// The category of dlock::errc; its name() is "dlock".
const std::error_category& category() noexcept;

std::error_code make_error_code(errc e) noexcept;

/// True for the codes that mean "someone else holds the lock" (timeout, attempts_exhausted).
bool is_contention(std::error_code ec) noexcept;

/// The detailed message behind the error code the calling thread's latest failing dlock call set
/// (what the throwing twin would have put in its exception: the field, the server's reply, the
/// node that failed), if `ec` is that code; otherwise ec.message(). Per thread: each thread sees
/// only the failures of its own calls, and the next failing call on the thread replaces it (a
/// successful call leaves it alone). "" for an empty `ec`. Never contains a password.
///   std::error_code ec;
///   auto held = client.acquire("job", {}, ec);
///   if (ec) log(dlock::last_error_message(ec));
std::string last_error_message(const std::error_code& ec);

/// The calling thread's latest stored failure message, whatever its code ("" if none yet).
std::string last_error_message();

/// The exception thrown by every dlock call that throws. `code()` is a dlock::errc.
class error : public std::system_error {
public:
    explicit error(errc e) : std::system_error(make_error_code(e)) {}
    error(errc e, const std::string& what) : std::system_error(make_error_code(e), what) {}
    error(std::error_code ec, const std::string& what) : std::system_error(ec, what) {}
};

}  // namespace dlock

template <>
struct std::is_error_code_enum<dlock::errc> : std::true_type {};
