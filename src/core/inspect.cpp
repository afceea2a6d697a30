#include "core/inspect.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <optional>

#include "core/status.hpp"

namespace dlock {

const char* to_string(lock_type type) noexcept {
    switch (type) {
        case lock_type::none: return "none";
        case lock_type::mutex: return "dlock::mutex";
        case lock_type::recursive_mutex: return "dlock::recursive_mutex";
        case lock_type::fair_mutex: return "dlock::fair_mutex";
        case lock_type::shared_mutex: return "dlock::shared_mutex";
        case lock_type::counting_semaphore: return "dlock::counting_semaphore";
        case lock_type::exclusive: return "exclusive";
        case lock_type::foreign: return "foreign";
    }
    return "unknown";
}

lock_info backend::inspect(std::string_view name) {
    std::error_code ec;
    auto info = inspect(name, ec);
    detail::throw_if(ec);
    return info;
}

lock_info backend::inspect(std::string_view name, std::error_code& ec) noexcept {
    detail::fail(ec, errc::unsupported,
                 "lock \"" + std::string(name) + "\": this backend cannot inspect locks");
    return {};
}

std::unique_ptr<lock_watch> backend::watch(std::string_view name, std::error_code& ec) noexcept {
    detail::fail(ec, errc::unsupported,
                 "lock \"" + std::string(name) + "\": this backend cannot watch locks");
    return nullptr;
}

namespace detail {
namespace {

/// The value at least `quorum` of `values` reach (the quorum-th largest); 0 when fewer.
template <class T>
T quorum_value(std::vector<T> values, std::size_t quorum) {
    if (quorum == 0 || values.size() < quorum) return T{};
    std::sort(values.begin(), values.end(), std::greater<>());
    return values[quorum - 1];
}

}  // namespace

lock_info merge_views(const std::string& name, std::vector<lock_info> views, std::size_t quorum,
                      std::error_code& ec) {
    ec.clear();
    lock_info out;
    out.name = name;
    out.quorum = quorum;
    std::size_t readable = 0;
    std::string failures;
    std::array<std::size_t, 8> held_types{}, seen_types{};
    std::vector<std::uint32_t> holders, readers, depth, permits, writer;
    std::vector<std::int64_t> leases;  // held servers; no expiry counts as the longest
    for (const auto& v : views) {
        if (!v.error.empty()) {
            failures += (failures.empty() ? "" : "; ") + v.error;
            continue;
        }
        ++readable;
        const auto t = static_cast<std::size_t>(v.type);
        if (t < seen_types.size() && v.type != lock_type::none) ++seen_types[t];
        holders.push_back(v.holders);
        readers.push_back(v.readers);
        depth.push_back(v.depth);
        permits.push_back(v.permits_in_use);
        writer.push_back(v.writer ? 1 : 0);
        if (v.held) {
            ++out.held_on;
            if (t < held_types.size()) ++held_types[t];
            leases.push_back(v.lease_left ? v.lease_left->count()
                                          : std::numeric_limits<std::int64_t>::max());
        }
        if (v.fencing_counter)
            out.fencing_counter = std::max(out.fencing_counter.value_or(0), *v.fencing_counter);
        if (v.permit_limit)
            out.permit_limit = std::max(out.permit_limit.value_or(0), *v.permit_limit);
        out.waiters = std::max(out.waiters, v.waiters);
        out.subscribers = std::max(out.subscribers, v.subscribers);
        if (out.detail.empty() && v.type == lock_type::foreign) out.detail = v.detail;
    }
    if (readable < quorum) {
        fail(ec, errc::quorum_unreachable,
             "lock \"" + name + "\": " + std::to_string(readable) + " of " +
                 std::to_string(views.size()) + " servers answered, quorum " +
                 std::to_string(quorum) + ": " + failures);
        return {};
    }
    out.held = out.held_on >= quorum;
    const auto& votes = out.held_on > 0 ? held_types : seen_types;
    const auto most = std::max_element(votes.begin(), votes.end());
    if (*most > 0) out.type = static_cast<lock_type>(most - votes.begin());
    if (out.type != lock_type::foreign) out.detail.clear();
    out.holders = quorum_value(holders, quorum);
    out.readers = quorum_value(readers, quorum);
    out.depth = quorum_value(depth, quorum);
    out.permits_in_use = quorum_value(permits, quorum);
    out.writer = quorum_value(writer, quorum) != 0;
    if (out.held) {
        const auto left = quorum_value(leases, quorum);
        if (left != std::numeric_limits<std::int64_t>::max())
            out.lease_left = std::chrono::milliseconds(left);
    }
    out.servers = std::move(views);
    return out;
}

}  // namespace detail
}  // namespace dlock
