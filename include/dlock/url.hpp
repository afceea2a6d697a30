// URL helpers every backend's URLs share (part of dlock::core): redaction for messages, and the
// password's place in the user-info. The user-info ends at the LAST '@' of the text (a password
// may hold an unencoded '@', '/', '?' or '#'); "user:password@" has a user and a password, and a
// lone "secret@" (no ':') is a password. Every function here, and every backend, reads user-info
// this one way.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlock {

/// `url` with every secret replaced by "***", for logs and messages (error messages of this
/// library already redact URLs): the password of its user-info, every query value except those
/// of `db`, `user`, `username` and rediss://'s `tls_*` options (paths, a host name, a flag)
/// (`password=`, `token=`, `auth=`, any key dlock does not know:
/// each could be a credential), every query item without '=', and a fragment. Control characters
/// are written as %XX, so a quoted URL is always one printable line. A user name is kept.
std::string redact_url(std::string_view url);

/// The scheme of `url` as written ("redis" for "redis://h", "REDIS" for "REDIS://h"), or empty
/// when it has none. Schemes are case-insensitive (RFC 3986): dlock accepts "REDIS://" too.
std::string_view url_scheme(std::string_view url) noexcept;

/// Where every secret of `url` lies (what redact_url() hides), as (offset, length) pairs in
/// order: to overwrite them in place, e.g. in a process's command line.
std::vector<std::pair<std::size_t, std::size_t>> url_secrets(std::string_view url);

/// Where the password of `url` is, as (offset, length), or nullopt when it has none (no scheme, no
/// user-info, or an empty password: "user:@host"). Lets a caller overwrite it in place.
std::optional<std::pair<std::size_t, std::size_t>> url_password(std::string_view url) noexcept;

/// `url` with `password` (percent-encoded) put into its user-info; a user name in it is kept
/// ("redis://alice:@host" gives user alice that password; "unix:///s.sock" becomes
/// "unix://:password@/s.sock"). Throws dlock::error with errc::invalid_argument when `url` has no
/// scheme or has a password already (a lone "redis://secret@host" is one, and so is
/// "?password="). The message quotes `url` redacted and never `password`.
std::string url_with_password(std::string_view url, std::string_view password);

}  // namespace dlock
