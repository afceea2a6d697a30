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

namespace dlock {

/// `url` with any password replaced by "***", for logs and messages (error messages of this
/// library already redact URLs). A user name is kept.
std::string redact_url(std::string_view url);

/// The scheme of `url` ("redis" for "redis://h"), or empty when it has none.
std::string_view url_scheme(std::string_view url) noexcept;

/// Where the password of `url` is, as (offset, length), or nullopt when it has none (no scheme, no
/// user-info, or an empty password: "user:@host"). Lets a caller overwrite it in place.
std::optional<std::pair<std::size_t, std::size_t>> url_password(std::string_view url) noexcept;

/// `url` with `password` (percent-encoded) put into its user-info; a user name in it is kept
/// ("redis://alice:@host" gives user alice that password). Throws dlock::error with
/// errc::invalid_argument when `url` has no scheme or has a password already (a lone
/// "redis://secret@host" is one). The message quotes `url` redacted and never `password`.
std::string url_with_password(std::string_view url, std::string_view password);

}  // namespace dlock
