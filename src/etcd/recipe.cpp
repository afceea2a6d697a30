#include "etcd/recipe.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

namespace dlock::etcd::detail {

using dlock::detail::queue_entry;
using dlock::detail::queue_role;

namespace {

constexpr std::size_t guid_length = 32;

bool lower_hex(std::string_view text) {
    return !text.empty() && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace

bool key_per_lease(lock_kind kind) noexcept {
    return kind != lock_kind::read && kind != lock_kind::permits;
}

std::string entry_key(std::string_view key_prefix, std::int64_t lease_id, lock_kind kind,
                      std::uint32_t count, std::string_view guid) {
    auto key = queue_key(key_prefix, lease_id);
    if (kind == lock_kind::read) return key + "-rd-" + std::string(guid);
    if (kind == lock_kind::permits)
        return key + "-pm" + std::to_string(count) + "-" + std::string(guid);
    return key;
}

queue_entry entry_of(std::string_view key_prefix, std::string key, std::int64_t create_revision) {
    queue_entry out{create_revision, queue_role::write, 1, {}};
    std::string_view rest(key);
    if (rest.starts_with(key_prefix)) rest.remove_prefix(key_prefix.size());
    // <lease hex>-rd-<guid> or <lease hex>-pm<count>-<guid>
    const auto dash = rest.find('-');
    if (dash != std::string_view::npos && lower_hex(rest.substr(0, dash)) &&
        rest.size() > guid_length + 1 && lower_hex(rest.substr(rest.size() - guid_length)) &&
        rest[rest.size() - guid_length - 1] == '-') {
        const auto middle = rest.substr(dash, rest.size() - guid_length - dash);  // "-rd-", ...
        if (middle == "-rd-") {
            out.role = queue_role::read;
        } else if (middle.starts_with("-pm") && middle.size() > 4) {
            const auto digits = middle.substr(3, middle.size() - 4);
            std::uint32_t count = 0;
            const auto [end, err] =
                std::from_chars(digits.data(), digits.data() + digits.size(), count);
            if (err == std::errc() && end == digits.data() + digits.size() && count >= 1 &&
                digits.front() != '0') {
                out.role = queue_role::permits;
                out.count = count;
            }
        }
    }
    out.id = std::move(key);
    return out;
}

std::string permits_key(const etcd_endpoint& endpoint, std::string_view name) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string key = endpoint.prefix + "/dlock-permits-";
    for (const char ch : name) {
        const auto c = static_cast<unsigned char>(ch);
        key += hex[c >> 4];
        key += hex[c & 15];
    }
    return key;
}

std::optional<std::uint32_t> parse_permits(std::string_view value) {
    std::uint64_t n = 0;
    const auto [end, err] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (value.empty() || err != std::errc() || end != value.data() + value.size() || n < 1 ||
        n > std::numeric_limits<std::uint32_t>::max()) {
        return std::nullopt;
    }
    return static_cast<std::uint32_t>(n);
}

standing locate(lock_kind kind, const std::vector<queue_entry>& entries, std::string_view ours,
                std::uint64_t limit) {
    standing out;
    const bool permits = kind == lock_kind::permits;
    // One name, one kind (dlock/backend.hpp): a semaphore's entries and a lock's never mix.
    out.clash = std::any_of(entries.begin(), entries.end(), [&](const queue_entry& e) {
        return (e.role == queue_role::permits) != permits;
    });
    if (out.clash) return out;
    const auto at = dlock::detail::locate_in_queue(entries, ours, limit);
    out.found = at.found;
    out.holds = at.holds;
    out.wake_successor = permits && at.holds && at.has_successor;
    out.watch_all = permits && !at.holds && at.first_waiter;
    out.watch = at.watch;
    return out;
}

const char* other_kind(lock_kind kind) noexcept {
    return kind == lock_kind::permits ? "lock" : "counting_semaphore";
}

}  // namespace dlock::etcd::detail
