// Backend-neutral URL helpers: the scheme, where the user-info (and so the password) lies, and
// redaction for messages. Each backend parses the rest of its own URLs (src/redis/url.hpp,
// src/zk/recipe.hpp); this file knows no scheme by name.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dlock/options.hpp>

namespace dlock::detail {

/// Whether `text` is a URL scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
bool is_scheme(std::string_view text) noexcept;

/// The scheme of `url` ("redis" for "redis://h"), or empty when `url` has no "://" after a valid
/// scheme.
std::string_view url_scheme(std::string_view url) noexcept;

/// Decodes %XX escapes of `in` into `out`; false on a '%' not followed by two hex digits.
bool percent_decode(std::string_view in, std::string& out);

/// `text` with every byte other than ALPHA / DIGIT / "-" / "." / "_" / "~" written as %XX.
std::string percent_encode(std::string_view text);

/// Where the user-info of a URL lies. It ends at the LAST '@' of the whole text, not of the
/// authority: a password may hold an unencoded '@', '/', '?' or '#', and then the authority cannot
/// be told from the path, so more is taken for the secret rather than less. "user:password@" has a
/// user and a password; a lone "secret@" (no ':') is a password, as Redis URLs spell a password
/// without a user. This is the one reading of user-info every part of dlock uses.
struct userinfo_span {
    std::size_t begin = 0;                       ///< first byte of the user-info
    std::size_t end = 0;                         ///< the '@' that ends it
    std::size_t colon = std::string_view::npos;  ///< the first ':' in [begin, end), or npos
    bool scheme = false;  ///< it follows "<scheme>://" (else the text starts with it)

    /// The user name: [begin, colon), empty without a ':'.
    std::string_view user(std::string_view url) const noexcept;
    /// The password's offset and length: after the ':', or all of it without one. Length 0 means
    /// no password ("user:@" or "@").
    std::size_t password_begin() const noexcept {
        return colon == std::string_view::npos ? begin : colon + 1;
    }
    std::size_t password_length() const noexcept { return end - password_begin(); }
};

/// The user-info of `url`: after "<scheme>://" if it starts so, else from the start of the text
/// (a bare "user:password@host"); nullopt when it has no '@' there.
std::optional<userinfo_span> find_userinfo(std::string_view url) noexcept;

/// Whether `a` and `b` are equal ignoring ASCII case (URL schemes and query keys, RFC 3986 3.1).
bool iequals(std::string_view a, std::string_view b) noexcept;

/// `url` with its scheme in lower case ("REDIS://h" -> "redis://h"): schemes are
/// case-insensitive (RFC 3986 3.1). A text without a scheme is returned unchanged.
std::string lower_scheme(std::string_view url);

/// Query keys whose values are shown in messages (db, user, username and rediss://'s tls_* paths
/// and flags): every other query value could be a credential (password=, token=, auth=, a key
/// dlock does not know...) and is redacted.
bool is_public_query_key(std::string_view key) noexcept;

/// `text` with control characters written as %XX, to quote a piece of user input in a message.
std::string printable(std::string_view text);

/// One item of a query string ("key=value"); the key is percent-decoded.
struct query_item {
    std::string key;           ///< decoded; empty when it does not decode
    std::string_view value;    ///< as written (still percent-encoded)
    bool has_value = false;    ///< the item had a '='
    bool key_decoded = false;  ///< the key's percent-escapes were valid
};

/// The items of `query` (the text after '?', without any fragment), split at '&'. Empty items
/// ("a=1&&b=2") are skipped.
std::vector<query_item> query_items(std::string_view query);

/// The query of `url` (after the first '?' that follows its user-info, up to any '#'), or empty.
std::string_view url_query(std::string_view url);

/// Where the secrets of `url` lie, as (offset, length) pairs in order: the password of its
/// user-info (find_userinfo), and every query value whose key is not public (plus every query
/// item without '=', all of it). A user-info holding '?' or '#' makes the rest of the URL after
/// its '@' secret too (a query value may hold an '@').
std::vector<std::pair<std::size_t, std::size_t>> secret_spans(std::string_view url);

/// `url` with every secret (secret_spans) replaced by "***", and control characters written as
/// %XX, so messages can quote it. A user name is kept only when it holds nothing but characters
/// allowed unencoded in user-info.
std::string redact_url(std::string_view url);

/// One "host[:port]" of a comma-separated server list (zk://, etcd://): `out` is "host:port" with
/// `default_port` when none is written; an IPv6 host stays in brackets. false with `why` (quoting
/// the item) for an empty host, an unclosed '[' or a port outside 1..65535.
bool parse_host_port(std::string_view item, std::string_view default_port, std::string& out,
                     std::string& why);

/// The TLS settings of rediss:// and etcds:// URLs and options (docs/tls.md), shared by the
/// backends that speak TLS.
/// True when `tls` sets anything.
bool any_tls(const tls_options& tls) noexcept;
/// One query option of a TLS URL into `tls`: tls_ca, tls_ca_dir, tls_cert, tls_key and
/// tls_server_name (a non-empty value, given once) and tls_insecure (0, 1, true, false).
/// nullopt when `key` is none of them; otherwise "" when it was applied, or why it is bad (the
/// value is quoted only for tls_insecure, whose value is never a secret).
std::optional<std::string> tls_query_item(std::string_view key, const std::string& value,
                                          tls_options& tls);
/// Fills what a URL's own TLS settings (`url`) leave unset from `options`: the URL's values win;
/// the CA file and directory, and the client certificate and its key, are taken as pairs.
void merge_tls_options(tls_options& url, const tls_options& options);

}  // namespace dlock::detail
