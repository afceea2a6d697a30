#include "redis/inspect.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace dlock::redis::detail {

script_call inspect_call(const std::string& lock_key, const std::string& channel) {
    const auto* script = find_script("inspect");
    if (!script) std::abort();  // the build embeds every src/redis/lua/*.lua
    // The suffixes of protocol.cpp's rows: fence (every kind), queue / alive (fair_mutex and
    // shared_mutex writers), readers (shared_mutex), counts / limit (counting_semaphore),
    // mutex_alive (dlock::mutex's registered waiters).
    return {script,
            {lock_key, lock_key + ":fence", lock_key + ":queue", lock_key + ":alive",
             lock_key + ":readers", lock_key + ":counts", lock_key + ":limit",
             lock_key + ":mutex_alive"},
            {channel}};
}

namespace {

constexpr std::array<std::pair<std::string_view, lock_type>, 7> type_names{{
    {"none", lock_type::none},
    {"mutex", lock_type::mutex},
    {"recursive_mutex", lock_type::recursive_mutex},
    {"fair_mutex", lock_type::fair_mutex},
    {"shared_mutex", lock_type::shared_mutex},
    {"counting_semaphore", lock_type::counting_semaphore},
    {"foreign", lock_type::foreign},
}};

bool count(const reply& r, std::uint32_t& out) {
    if (r.type != reply::kind::integer || r.integer < 0 ||
        r.integer > static_cast<std::int64_t>(UINT32_MAX))
        return false;
    out = static_cast<std::uint32_t>(r.integer);
    return true;
}

}  // namespace

bool parse_inspect_reply(const reply& r, lock_info& out, std::string& why) {
    enum {
        type,
        held,
        holders,
        readers,
        writer,
        depth,
        permits,
        limit,
        waiters,
        subscribers,
        fence,
        lease,
        detail,
        size
    };
    if (r.type != reply::kind::array || r.elements.size() != size) {
        why = "inspect script: unexpected " + std::string(to_string(r.type)) + " reply";
        if (r.is_error()) why += ": " + r.text;
        return false;
    }
    const auto& e = r.elements;
    const auto bad = [&](const char* field) {
        why = std::string("inspect script: bad ") + field + " in its reply";
        return false;
    };
    bool known = false;
    for (const auto& [text, value] : type_names) {
        if (e[type].text == text) {
            out.type = value;
            known = true;
        }
    }
    if (!known || e[type].type != reply::kind::string) return bad("type");
    std::uint32_t flag = 0;
    if (!count(e[held], flag)) return bad("held");
    out.held = flag != 0;
    if (!count(e[writer], flag)) return bad("writer");
    out.writer = flag != 0;
    if (!count(e[holders], out.holders)) return bad("holders");
    if (!count(e[readers], out.readers)) return bad("readers");
    if (!count(e[depth], out.depth)) return bad("depth");
    if (!count(e[permits], out.permits_in_use)) return bad("permits");
    if (!count(e[waiters], out.waiters)) return bad("waiters");
    if (!count(e[subscribers], out.subscribers)) return bad("subscribers");
    if (e[limit].type != reply::kind::integer) return bad("limit");
    if (e[limit].integer >= 0) {
        std::uint32_t n = 0;
        if (!count(e[limit], n)) return bad("limit");
        out.permit_limit = n;
    }
    if (e[fence].type != reply::kind::string) return bad("fence");
    if (!e[fence].text.empty()) {
        std::uint64_t n = 0;
        const auto& t = e[fence].text;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
        if (ec != std::errc() || end != t.data() + t.size()) return bad("fence");
        out.fencing_counter = n;
    }
    if (e[lease].type != reply::kind::integer) return bad("lease");
    // -1: not held; -2: held by a key without expiry (not set by dlock): no lease to report.
    if (e[lease].integer >= 0) out.lease_left = std::chrono::milliseconds(e[lease].integer);
    if (e[detail].type != reply::kind::string) return bad("detail");
    out.detail = e[detail].text;
    return true;
}

}  // namespace dlock::redis::detail
