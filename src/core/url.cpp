#include "core/url.hpp"

#include <dlock/error.hpp>
#include <dlock/url.hpp>

#include <cctype>

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

std::string redact_url(std::string_view url) {
    const auto span = find_userinfo(url);
    if (!span) return std::string(url);
    const auto user = span->user(url);
    const bool keep_user = span->colon != std::string_view::npos && is_plain_user(user);
    std::string out(url.substr(0, span->begin));
    if (keep_user) {
        out += user;
        out += ':';
    }
    out += "***";
    out += url.substr(span->end);
    return out;
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

std::string url_with_password(std::string_view url, std::string_view password) {
    const auto scheme = detail::url_scheme(url);
    if (scheme.empty()) {
        throw error(errc::invalid_argument,
                    "URL \"" + detail::redact_url(url) +
                        "\" has no scheme, so a password cannot be put into it");
    }
    const auto span = detail::find_userinfo(url);
    if (span && span->password_length() > 0) {
        throw error(errc::invalid_argument,
                    "URL \"" + detail::redact_url(url) +
                        "\" has a password already (a lone \"secret@\" is a password; write a "
                        "user name as \"user:@\")");
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
