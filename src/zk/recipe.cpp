#include "zk/recipe.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "core/queue_locate.hpp"
#include "core/status.hpp"
#include "core/url.hpp"

namespace dlock::zk::detail {

using dlock::detail::fail;

namespace {

constexpr std::string_view scheme = "zk://";
constexpr std::string_view default_base = "/dlock";
constexpr std::size_t guid_length = 32;
constexpr std::size_t sequence_digits = 10;

}  // namespace

zk_endpoint parse_zk_url(std::string_view written, std::error_code& ec) {
    ec.clear();
    const auto bad = [&](const std::string& why) {
        // Quoted with any credentials hidden: this parser rejects them, but the text is the user's.
        fail(ec, errc::invalid_argument,
             "URL \"" + dlock::detail::redact_url(written) + "\": " + why);
        return zk_endpoint{};
    };
    // Schemes are case-insensitive (RFC 3986 3.1): "ZK://" is "zk://".
    const std::string lowered = dlock::detail::lower_scheme(written);
    const std::string_view url = lowered;
    if (!url.starts_with(scheme)) return bad("must start with zk://");
    const auto rest = url.substr(scheme.size());
    if (rest.find_first_of("?#@") != std::string_view::npos) {
        return bad(
            "query strings, fragments and credentials are not supported "
            "(give a digest in the client options)");
    }
    const auto slash = rest.find('/');
    const auto authority = rest.substr(0, slash);
    if (authority.empty()) return bad("no host given");
    zk_endpoint out;
    std::size_t start = 0;
    for (;;) {
        const auto comma = authority.find(',', start);
        const auto item = authority.substr(start, comma - start);
        std::string host, why;
        if (!dlock::detail::parse_host_port(item, "2181", host, why)) return bad(why);
        if (!out.hosts.empty()) out.hosts += ',';
        out.hosts += host;
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
    if (path.empty()) path = default_base;
    if (path == "/") return out;  // the root itself
    if (path.ends_with('/')) return bad("the base path must not end with '/'");
    std::size_t at = 1;
    while (at <= path.size()) {
        const auto next = std::min(path.find('/', at), path.size());
        const auto part = path.substr(at, next - at);
        if (part.empty()) return bad("empty component in the base path");
        if (part == "." || part == "..") return bad("'.' and '..' are not allowed in the path");
        for (const char c : part) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                return bad("control character in the base path");
        }
        at = next + 1;
    }
    out.base = std::string(path);
    return out;
}

std::string encode_name(std::string_view name) {
    static constexpr char hex[] = "0123456789ABCDEF";
    if (name == ".") return "%2E";
    if (name == "..") return "%2E%2E";
    std::string out;
    out.reserve(name.size());
    for (const char ch : name) {
        const auto c = static_cast<unsigned char>(ch);
        const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                           (c >= '0' && c <= '9') ||
                           std::string_view("._~:@=+,-").find(ch) != std::string_view::npos;
        if (plain) {
            out += ch;
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 0xF];
        }
    }
    return out;
}

std::string node_prefix(std::string_view guid, bool read) {
    return std::string(guid) + (read ? "-rd-" : "-wr-");
}

std::optional<lock_node> parse_node(const std::string& name) {
    // <32 hex guid>-rd-<10 digits> or -wr-
    if (name.size() != guid_length + 4 + sequence_digits) return std::nullopt;
    const std::string_view view(name);
    const auto kind = view.substr(guid_length, 4);
    if (kind != "-rd-" && kind != "-wr-") return std::nullopt;
    const auto digits = view.substr(guid_length + 4);
    std::int64_t sequence = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), sequence);
    if (err != std::errc() || end != digits.data() + digits.size() || sequence < 0)
        return std::nullopt;
    return lock_node{name, std::string(view.substr(0, guid_length)), kind == "-rd-", sequence};
}

std::string permit_prefix(std::string_view guid, std::uint32_t count) {
    char digits[16];
    std::snprintf(digits, sizeof digits, "%010u", count);
    return std::string(guid) + "-pm" + digits + "-";
}

namespace {

struct permit_node {
    std::string name;
    std::uint64_t count = 0;
    std::int64_t sequence = 0;
};

std::optional<permit_node> parse_permit_node(const std::string& name) {
    // <32 hex guid>-pm<10 digits>-<10 digits>
    constexpr std::size_t size = guid_length + 3 + 10 + 1 + sequence_digits;
    if (name.size() != size) return std::nullopt;
    const std::string_view view(name);
    if (view.substr(guid_length, 3) != "-pm" || view[guid_length + 13] != '-') return std::nullopt;
    const auto number = [](std::string_view text, auto& out) {
        const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), out);
        return err == std::errc() && end == text.data() + text.size();
    };
    permit_node n{name};
    if (!number(view.substr(guid_length + 3, 10), n.count) ||
        !number(view.substr(guid_length + 14), n.sequence) || n.sequence < 0) {
        return std::nullopt;
    }
    return n;
}

}  // namespace

bool is_permit_node(const std::string& name) { return parse_permit_node(name).has_value(); }

namespace {

/// A child as an entry of the shared queue rules (core/queue_locate.hpp), if it is a node of the
/// family asked for (semaphore nodes, or read and write nodes); nullopt otherwise.
std::optional<dlock::detail::queue_entry> entry_of(const std::string& child, bool permits) {
    using dlock::detail::queue_role;
    if (permits) {
        auto p = parse_permit_node(child);
        if (!p) return std::nullopt;
        return dlock::detail::queue_entry{p->sequence, queue_role::permits, p->count,
                                          std::move(p->name)};
    }
    auto n = parse_node(child);
    if (!n) return std::nullopt;
    return dlock::detail::queue_entry{n->sequence, n->read ? queue_role::read : queue_role::write,
                                      1, std::move(n->name)};
}

std::vector<dlock::detail::queue_entry> entries_of(const std::vector<std::string>& children,
                                                   bool permits) {
    std::vector<dlock::detail::queue_entry> out;
    out.reserve(children.size());
    for (const auto& c : children) {
        if (auto e = entry_of(c, permits)) out.push_back(std::move(*e));
    }
    return out;
}

}  // namespace

position locate(const std::vector<std::string>& children, std::string_view ours) {
    const auto p = dlock::detail::locate_in_queue(entries_of(children, false), ours, 0);
    return {p.found, p.holds, p.watch, p.watch_is_last, p.refresh};
}

permit_position locate_permits(const std::vector<std::string>& children, std::string_view ours,
                               std::uint64_t limit) {
    const auto p = dlock::detail::locate_in_queue(entries_of(children, true), ours, limit);
    return {p.found, p.holds, p.has_successor, p.first_waiter, p.watch};
}

std::string driver::prefix(std::string_view guid) const {
    if (permits()) return permit_prefix(guid, count_);
    return node_prefix(guid, kind_ == lock_kind::read);
}

bool driver::foreign(const std::string& child) const {
    return permits() ? parse_node(child).has_value() : is_permit_node(child);
}

standing driver::locate(const std::vector<std::string>& children, std::string_view ours,
                        std::uint64_t limit) const {
    standing out;
    if (permits()) {
        auto p = locate_permits(children, ours, limit);
        out.found = p.found;
        out.holds = p.holds;
        out.wake_successor = p.holds && p.has_successor;
        out.watch_parent = !p.holds && p.first_waiter;
        out.watch = std::move(p.watch);
    } else {
        auto p = detail::locate(children, ours);
        out.found = p.found;
        out.holds = p.holds;
        out.watch = std::move(p.watch);
        out.watch_is_last = p.watch_is_last;
        out.refresh = std::move(p.refresh);
    }
    return out;
}

std::string driver::quoted(std::string_view name) const {
    return std::string(permits() ? "semaphore \"" : "lock \"") + std::string(name) + "\"";
}

const char* driver::other_kind() const noexcept {
    return permits() ? "lock" : "counting_semaphore";
}

const char* driver::busy() const noexcept {
    return permits() ? "has no permits free" : "is held by someone else";
}

const char* driver::still() const noexcept { return permits() ? "still full" : "still held"; }

children_view view_children(const std::vector<std::string>& children, std::uint64_t limit) {
    children_view out;
    std::vector<dlock::detail::queue_entry> entries;
    entries.reserve(children.size());
    for (const auto& c : children) {
        if (auto n = entry_of(c, false)) {
            entries.push_back(std::move(*n));
        } else if (auto p = entry_of(c, true)) {
            entries.push_back(std::move(*p));
        } else {
            ++out.foreign;
        }
    }
    auto v = dlock::detail::view_queue(std::move(entries), limit);
    out.readers = v.readers;
    out.writer = v.writer;
    out.lock_waiters = v.lock_waiters;
    out.any_read = v.any_read;
    out.permit_holders = v.permit_holders;
    out.permits_in_use = v.permits_in_use;
    out.permit_waiters = v.permit_waiters;
    out.holding = std::move(v.holding);
    return out;
}

}  // namespace dlock::zk::detail
