#include "core/url.hpp"

#include <dlock/error.hpp>
#include <dlock/url.hpp>

#include <cctype>
#include <charconv>
#include <utility>
#include <vector>

namespace dlock::detail {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// A user name that may be shown: only characters RFC 3986 allows unencoded in userinfo. Anything
// else ('/', '?', '#', '@', ...) means the split into user and password is not what the writer
// meant, so nothing of it is shown.
bool is_plain_user(std::string_view text) {
    for (const char c : text) {
        if (!std::isalnum(static_cast<unsigned char>(c)) &&
            std::string_view("-._~%!$&'()*+,;=").find(c) == std::string_view::npos)
            return false;
    }
    return true;
}

}  // namespace

bool is_scheme(std::string_view text) noexcept {
    if (text.empty() || !std::isalpha(static_cast<unsigned char>(text.front()))) return false;
    for (const char c : text) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.')
            return false;
    }
    return true;
}

std::string_view url_scheme(std::string_view url) noexcept {
    const auto end = url.find("://");
    if (end == std::string_view::npos || !is_scheme(url.substr(0, end))) return {};
    return url.substr(0, end);
}

bool percent_decode(std::string_view in, std::string& out) {
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '%') {
            out.push_back(in[i]);
            continue;
        }
        if (i + 2 >= in.size()) return false;  // '%' needs two hex digits after it
        const int hi = hex_value(in[i + 1]);
        const int lo = hex_value(in[i + 2]);
        if (hi < 0 || lo < 0) return false;
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
    }
    return true;
}

std::string percent_encode(std::string_view text) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
            out += c;
        } else {
            out += '%';
            out += hex[u >> 4];
            out += hex[u & 0xF];
        }
    }
    return out;
}

std::string_view userinfo_span::user(std::string_view url) const noexcept {
    if (colon == std::string_view::npos) return {};
    return url.substr(begin, colon - begin);
}

std::optional<userinfo_span> find_userinfo(std::string_view url) noexcept {
    const auto scheme = url_scheme(url);
    userinfo_span span;
    span.scheme = !scheme.empty();
    span.begin = span.scheme ? scheme.size() + 3 : 0;
    const auto at = url.rfind('@');
    if (at == std::string_view::npos || at < span.begin) return std::nullopt;
    span.end = at;
    const auto colon = url.substr(0, at).find(':', span.begin);
    span.colon = colon;
    return span;
}

namespace {

using span_list = std::vector<std::pair<std::size_t, std::size_t>>;

// The secrets after `from` (the end of the user-info, or of "scheme://"): every query value whose
// key is not public, every query item without '=' (all of it: the item itself may be the
// secret), and a fragment (all of it).
void query_secrets(std::string_view url, std::size_t from, span_list& out) {
    const auto hash = url.find('#', from);
    const auto end = hash == std::string_view::npos ? url.size() : hash;
    const auto q = url.find('?', from);
    if (q != std::string_view::npos && q < end) {
        std::size_t i = q + 1;
        while (i <= end) {
            auto amp = url.find('&', i);
            if (amp == std::string_view::npos || amp > end) amp = end;
            const auto item = url.substr(i, amp - i);
            const auto eq = item.find('=');
            std::string key;
            if (eq == std::string_view::npos || !percent_decode(item.substr(0, eq), key)) {
                if (!item.empty()) out.emplace_back(i, item.size());
            } else if (!is_public_query_key(key) && eq + 1 < item.size()) {
                out.emplace_back(i + eq + 1, item.size() - eq - 1);
            }
            i = amp + 1;
        }
    }
    if (hash != std::string_view::npos && hash + 1 < url.size())
        out.emplace_back(hash + 1, url.size() - hash - 1);
}

// The secrets after the user-info (which is handled by the caller).
span_list secrets_after_userinfo(std::string_view url, const std::optional<userinfo_span>& span) {
    span_list out;
    if (span) {
        const auto userinfo = url.substr(span->begin, span->end - span->begin);
        if (userinfo.find_first_of("?#") != std::string_view::npos) {
            // The '@' may lie inside a query value or a fragment: what follows it may be the rest
            // of that secret.
            if (span->end + 1 < url.size())
                out.emplace_back(span->end + 1, url.size() - span->end - 1);
            return out;
        }
        query_secrets(url, span->end + 1, out);
        return out;
    }
    const auto scheme = url_scheme(url);
    query_secrets(url, scheme.empty() ? 0 : scheme.size() + 3, out);
    return out;
}

// `text` with control characters written as %XX: a message must not carry a raw newline or a
// terminal escape sequence from the user's input.
void append_printable(std::string& out, std::string_view text) {
    static constexpr char hex[] = "0123456789ABCDEF";
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            out += '%';
            out += hex[u >> 4];
            out += hex[u & 0xF];
        } else {
            out += c;
        }
    }
}

}  // namespace

std::string printable(std::string_view text) {
    std::string out;
    append_printable(out, text);
    return out;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    }
    return true;
}

std::string lower_scheme(std::string_view url) {
    std::string out(url);
    const auto scheme = url_scheme(url);
    for (std::size_t i = 0; i < scheme.size(); ++i) {
        out[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[i])));
    }
    return out;
}

bool is_public_query_key(std::string_view key) noexcept {
    // The TLS options of rediss:// name files, a host name and a flag, never a secret: showing
    // them lets a redacted URL say which CA or certificate was used (docs/tls.md).
    return iequals(key, "db") || iequals(key, "user") || iequals(key, "username") ||
           iequals(key, "tls_ca") || iequals(key, "tls_ca_dir") || iequals(key, "tls_cert") ||
           iequals(key, "tls_key") || iequals(key, "tls_server_name") ||
           iequals(key, "tls_insecure");
}

std::vector<query_item> query_items(std::string_view query) {
    std::vector<query_item> out;
    std::size_t i = 0;
    while (i <= query.size()) {
        auto amp = query.find('&', i);
        if (amp == std::string_view::npos) amp = query.size();
        const auto item = query.substr(i, amp - i);
        i = amp + 1;
        if (item.empty()) continue;
        query_item q;
        const auto eq = item.find('=');
        q.has_value = eq != std::string_view::npos;
        if (q.has_value) q.value = item.substr(eq + 1);
        q.key_decoded = percent_decode(item.substr(0, eq), q.key);
        if (!q.key_decoded) q.key.clear();
        out.push_back(std::move(q));
    }
    return out;
}

std::string_view url_query(std::string_view url) {
    const auto span = find_userinfo(url);
    const auto scheme = url_scheme(url);
    const std::size_t from = span ? span->end + 1 : scheme.empty() ? 0 : scheme.size() + 3;
    const auto q = url.find('?', from);
    if (q == std::string_view::npos) return {};
    const auto hash = url.find('#', q);
    return url.substr(q + 1,
                      hash == std::string_view::npos ? std::string_view::npos : hash - q - 1);
}

std::vector<std::pair<std::size_t, std::size_t>> secret_spans(std::string_view url) {
    const auto span = find_userinfo(url);
    span_list out;
    if (span && span->password_length() > 0) {
        out.emplace_back(span->password_begin(), span->password_length());
    }
    const auto rest = secrets_after_userinfo(url, span);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
}

std::string redact_url(std::string_view url) {
    const auto span = find_userinfo(url);
    std::string out;
    std::size_t pos = 0;
    if (span) {
        const auto user = span->user(url);
        const bool keep_user = span->colon != std::string_view::npos && is_plain_user(user);
        append_printable(out, url.substr(0, span->begin));
        if (keep_user) {
            out += user;
            out += ':';
        }
        out += "***";
        pos = span->end;
    }
    for (const auto& [begin, length] : secrets_after_userinfo(url, span)) {
        append_printable(out, url.substr(pos, begin - pos));
        out += "***";
        pos = begin + length;
    }
    append_printable(out, url.substr(pos));
    return out;
}

namespace {

bool valid_port(std::string_view text) {
    if (text.empty() || text.size() > 5) return false;
    unsigned value = 0;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
    return err == std::errc() && end == text.data() + text.size() && value >= 1 && value <= 65535;
}

}  // namespace

bool parse_host_port(std::string_view item, std::string_view default_port, std::string& out,
                     std::string& why) {
    std::string_view host, port;
    if (item.starts_with('[')) {
        const auto close = item.find(']');
        if (close == std::string_view::npos) {
            why = "unclosed '[' in host \"" + printable(item) + "\"";
            return false;
        }
        host = item.substr(0, close + 1);
        const auto rest = item.substr(close + 1);
        if (!rest.empty()) {
            if (rest[0] != ':') {
                why = "unexpected text after ']' in \"" + printable(item) + "\"";
                return false;
            }
            port = rest.substr(1);
            if (port.empty()) port = "!";
        }
    } else {
        const auto colon = item.find(':');
        host = item.substr(0, colon);
        if (colon != std::string_view::npos) {
            port = item.substr(colon + 1);
            if (port.empty()) port = "!";
        }
    }
    if (host.empty() || host == "[]") {
        why = "empty host in \"" + printable(item) + "\"";
        return false;
    }
    if (!port.empty() && !valid_port(port)) {
        why = "bad port \"" + printable(port == "!" ? "" : port) + "\" in \"" + printable(item) +
              "\" (must be 1..65535)";
        return false;
    }
    out = std::string(host) + ":" + std::string(port.empty() ? default_port : port);
    return true;
}

bool any_tls(const tls_options& tls) noexcept {
    return !tls.ca_file.empty() || !tls.ca_dir.empty() || !tls.cert_file.empty() ||
           !tls.key_file.empty() || !tls.server_name.empty() || tls.insecure_skip_verify;
}

std::optional<std::string> tls_query_item(std::string_view key, const std::string& value,
                                          tls_options& tls) {
    if (std::string* field = iequals(key, "tls_ca")            ? &tls.ca_file
                             : iequals(key, "tls_ca_dir")      ? &tls.ca_dir
                             : iequals(key, "tls_cert")        ? &tls.cert_file
                             : iequals(key, "tls_key")         ? &tls.key_file
                             : iequals(key, "tls_server_name") ? &tls.server_name
                                                               : nullptr) {
        if (!field->empty()) return "\"" + printable(key) + "\" is given twice";
        if (value.empty()) return "\"" + printable(key) + "\" is empty";
        *field = value;
        return std::string();
    }
    if (iequals(key, "tls_insecure")) {
        if (value == "1" || iequals(value, "true")) {
            tls.insecure_skip_verify = true;
        } else if (value != "0" && !iequals(value, "false")) {
            return "tls_insecure=" + printable(value) + " is not 0, 1, true or false";
        }
        return std::string();
    }
    return std::nullopt;
}

void merge_tls_options(tls_options& url, const tls_options& options) {
    if (url.ca_file.empty() && url.ca_dir.empty()) {
        url.ca_file = options.ca_file;
        url.ca_dir = options.ca_dir;
    }
    if (url.cert_file.empty()) {
        url.cert_file = options.cert_file;
        url.key_file = options.key_file;
    }
    if (url.server_name.empty()) url.server_name = options.server_name;
    url.insecure_skip_verify = url.insecure_skip_verify || options.insecure_skip_verify;
}

}  // namespace dlock::detail

namespace dlock {

std::string redact_url(std::string_view url) { return detail::redact_url(url); }

std::string_view url_scheme(std::string_view url) noexcept { return detail::url_scheme(url); }

std::optional<std::pair<std::size_t, std::size_t>> url_password(std::string_view url) noexcept {
    const auto span = detail::find_userinfo(url);
    if (!span || !span->scheme || span->password_length() == 0) return std::nullopt;
    return std::pair{span->password_begin(), span->password_length()};
}

std::vector<std::pair<std::size_t, std::size_t>> url_secrets(std::string_view url) {
    return detail::secret_spans(url);
}

std::string url_with_password(std::string_view url, std::string_view password) {
    const auto scheme = detail::url_scheme(url);
    if (scheme.empty()) {
        throw error(errc::invalid_argument,
                    "URL \"" + detail::redact_url(url) +
                        "\" has no scheme, so a password cannot be put into it");
    }
    const auto span = detail::find_userinfo(url);
    bool query_password = false;
    for (const auto& item : detail::query_items(detail::url_query(url))) {
        query_password = query_password || detail::iequals(item.key, "password");
    }
    if ((span && span->password_length() > 0) || query_password) {
        throw error(errc::invalid_argument,
                    "URL \"" + detail::redact_url(url) +
                        "\" has a password already (in its user-info or ?password=; a lone "
                        "\"secret@\" is a password; write a user name as \"user:@\")");
    }
    const auto user = span ? span->user(url) : std::string_view{};
    const auto rest = span ? span->end + 1 : scheme.size() + 3;
    std::string out(url.substr(0, scheme.size() + 3));
    out += user;
    out += ':';
    out += detail::percent_encode(password);
    out += '@';
    out += url.substr(rest);
    return out;
}

}  // namespace dlock
