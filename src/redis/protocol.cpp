#include "redis/protocol.hpp"

#include <array>
#include <optional>

namespace dlock::redis::detail {
namespace {

struct protocol_row {
    lock_kind kind;
    std::string_view acquire, release, renew, leave;
    std::vector<std::string_view> key_suffixes;
    bool queued;
};

// One row per kind; the scripts are src/redis/lua/<name>.lua. docs/redis-lock.md (exclusive)
// and docs/lock-family.md (the others) describe each protocol.
const std::array<protocol_row, 6>& rows() {
    static const std::array<protocol_row, 6> table{{
        {lock_kind::exclusive,
         "acquire",
         "release",
         "renew",
         "mutex_leave",
         {":fence", ":mutex_waiters", ":mutex_alive", ":mutex_arrivals"},
         false},
        {lock_kind::reentrant,
         "reentrant_acquire",
         "reentrant_release",
         "reentrant_renew",
         "",
         {":fence"},
         false},
        {lock_kind::fair,
         "fair_acquire",
         "fair_release",
         "renew",
         "fair_release",
         {":fence", ":queue", ":alive", ":arrivals"},
         true},
        {lock_kind::read,
         "rw_read_acquire",
         "rw_read_release",
         "rw_read_renew",
         "",
         {":fence", ":readers", ":queue", ":alive", ":arrivals"},
         false},
        {lock_kind::write,
         "rw_write_acquire",
         "rw_write_release",
         "renew",
         "rw_write_release",
         {":fence", ":readers", ":queue", ":alive", ":arrivals"},
         true},
        {lock_kind::permits,
         "semaphore_acquire",
         "semaphore_release",
         "semaphore_renew",
         "",
         {":fence", ":counts", ":limit"},
         false},
    }};
    return table;
}

std::optional<lock_protocol> build(const protocol_row& row) {
    const auto* acquire = find_script(row.acquire);
    const auto* release = find_script(row.release);
    const auto* renew = find_script(row.renew);
    const auto* leave = row.leave.empty() ? nullptr : find_script(row.leave);
    if (!acquire || !release || !renew || (row.queued && !leave)) return std::nullopt;
    return lock_protocol{row.kind, acquire, release, renew, leave, row.key_suffixes, row.queued};
}

}  // namespace

const lock_protocol* protocol_for(lock_kind kind) noexcept {
    static const auto built = [] {
        std::array<std::optional<lock_protocol>, 6> out;
        for (const auto& row : rows()) out[static_cast<std::size_t>(row.kind)] = build(row);
        return out;
    }();
    const auto i = static_cast<std::size_t>(kind);
    if (i >= built.size() || !built[i]) return nullptr;
    return &*built[i];
}

}  // namespace dlock::redis::detail
