#include "redis/scripts.hpp"

#include <cstdlib>

#include "core/status.hpp"

namespace dlock::redis::detail {
namespace lua {
struct embedded_script {
    std::string_view name, text, sha1;
};
extern const embedded_script embedded[];
extern const std::size_t embedded_count;
}  // namespace lua

const std::vector<script>& all_scripts() noexcept {
    // Built once from the generated table (cmake/embed_lua.cmake); a handful of entries.
    static const std::vector<script> all = [] {
        std::vector<script> v;
        for (std::size_t i = 0; i < lua::embedded_count; ++i) {
            const auto& e = lua::embedded[i];
            v.push_back({e.name, e.text, e.sha1});
        }
        return v;
    }();
    return all;
}

const script* find_script(std::string_view name) noexcept {
    for (const auto& s : all_scripts()) {
        if (s.name == name) return &s;
    }
    return nullptr;
}

namespace {
const script& required(std::string_view name) noexcept {
    const auto* s = find_script(name);
    if (!s)
        std::abort();  // the build embeds every src/redis/lua/*.lua: a missing core script is a
                       // broken build, not a runtime condition
    return *s;
}
}  // namespace

const script& raise_fence_script() noexcept {
    static const script& s = required("raise_fence");
    return s;
}

namespace {

/// EVALSHA/EVAL command for `call`; `nkeys` keeps the key count's text alive.
command_args eval_command(const script_call& call, std::string& nkeys, bool by_sha) {
    nkeys = std::to_string(call.keys.size());
    command_args c;
    c.reserve(3 + call.keys.size() + call.args.size());
    c.push_back(by_sha ? "EVALSHA" : "EVAL");
    c.push_back(by_sha ? call.which->sha1 : call.which->source);
    c.push_back(nkeys);
    for (const auto& k : call.keys) c.push_back(k);
    for (const auto& a : call.args) c.push_back(a);
    return c;
}

bool is_noscript(const reply& r) noexcept { return r.is_error() && r.text.starts_with("NOSCRIPT"); }

}  // namespace

void run_everywhere(std::span<script_batch> batches) {
    std::vector<std::vector<std::string>> nkeys(batches.size());
    std::vector<exchange> first(batches.size());
    for (std::size_t b = 0; b < batches.size(); ++b) {
        auto& batch = batches[b];
        nkeys[b].resize(batch.calls->size());
        first[b].conn = batch.conn;
        first[b].deadline = batch.deadline;
        if (batch.messages_first) first[b].commands.push_back({"PING"});
        for (std::size_t i = 0; i < batch.calls->size(); ++i) {
            first[b].commands.push_back(eval_command((*batch.calls)[i], nkeys[b][i], true));
        }
    }
    exchange_all(first);

    // The server forgot a script (SCRIPT FLUSH, restart, failover): EVAL caches it again.
    std::vector<exchange> second;
    std::vector<std::pair<std::size_t, std::vector<std::size_t>>> retried;  // batch, call indexes
    for (std::size_t b = 0; b < batches.size(); ++b) {
        auto& batch = batches[b];
        batch.ec = first[b].ec;
        batch.error = std::move(first[b].error);
        batch.replies = std::move(first[b].replies);
        if (batch.ec) continue;
        // The PING's reply, whatever it is (an ACL without +ping refuses it): the calls count.
        if (batch.messages_first) batch.replies.erase(batch.replies.begin());
        std::vector<std::size_t> missing;
        for (std::size_t i = 0; i < batch.replies.size(); ++i) {
            if (is_noscript(batch.replies[i])) missing.push_back(i);
        }
        if (missing.empty()) continue;
        exchange x{batch.conn, {}, batch.deadline};
        for (const auto i : missing)
            x.commands.push_back(eval_command((*batch.calls)[i], nkeys[b][i], false));
        second.push_back(std::move(x));
        retried.emplace_back(b, std::move(missing));
    }
    if (second.empty()) return;
    exchange_all(second);
    for (std::size_t k = 0; k < second.size(); ++k) {
        auto& batch = batches[retried[k].first];
        if (second[k].ec) {
            batch.ec = second[k].ec;
            batch.error = std::move(second[k].error);
            batch.replies.clear();
            continue;
        }
        const auto& missing = retried[k].second;
        for (std::size_t j = 0; j < missing.size(); ++j)
            batch.replies[missing[j]] = std::move(second[k].replies[j]);
    }
}

std::vector<reply> run_scripts(connection& conn, const std::vector<script_call>& calls,
                               std::error_code& ec, steady::time_point latest) {
    script_batch batch{&conn, std::make_shared<const std::vector<script_call>>(calls),
                       std::min(conn.default_deadline(), latest)};
    run_everywhere({&batch, 1});
    if (batch.ec) dlock::detail::fail(ec, batch.ec, batch.error);
    return std::move(batch.replies);
}

reply run_script(connection& conn, const script_call& call, std::error_code& ec) {
    auto replies = run_scripts(conn, {call}, ec);
    if (ec) return {};
    return std::move(replies.front());
}

void script_error(const script_call& call, const reply& r, const connection& conn,
                  std::error_code& ec) {
    const auto where = "redis " + conn.settings().endpoint.describe() + ": " +
                       std::string(call.which->name) + " script on \"" +
                       (call.keys.empty() ? std::string() : call.keys.front()) + "\": ";
    if (!r.is_error()) {
        return dlock::detail::fail(ec, errc::unexpected_reply,
                                   where + "unexpected " + to_string(r.type) + " reply");
    }
    // Script errors arrive wrapped ("ERR Error running script ... WRONGTYPE ..."), so search.
    // A replica refuses the script's first write with READONLY (whatever wraps it): that, not
    // the key's type, is the cause to name.
    if (r.text.find("READONLY") != std::string::npos) {
        return dlock::detail::fail(
            ec, errc::server_error,
            where + "this server is a read-only replica (locks need the primary): " + r.text);
    }
    if (r.text.find("WRONGTYPE") != std::string::npos) {
        return dlock::detail::fail(ec, errc::unexpected_reply, where + r.text);
    }
    dlock::detail::fail(ec, errc::server_error, where + r.text);
}

}  // namespace dlock::redis::detail
