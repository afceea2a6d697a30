#include "redis/scripts.hpp"

#include "core/status.hpp"

namespace dlock::redis::detail {
namespace lua {
extern const std::string_view acquire, acquire_sha1, release, release_sha1, renew, renew_sha1;
}  // namespace lua

const script& acquire_script() noexcept {
    static const script s{"acquire", lua::acquire, lua::acquire_sha1};
    return s;
}
const script& release_script() noexcept {
    static const script s{"release", lua::release, lua::release_sha1};
    return s;
}
const script& renew_script() noexcept {
    static const script s{"renew", lua::renew, lua::renew_sha1};
    return s;
}

namespace {

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

std::vector<reply> run_scripts(connection& conn, const std::vector<script_call>& calls, std::error_code& ec,
                               steady::time_point latest) {
    std::vector<std::string> nkeys(calls.size());
    std::vector<command_args> commands;
    commands.reserve(calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) commands.push_back(eval_command(calls[i], nkeys[i], true));
    auto replies = conn.pipeline(commands, ec, latest);
    if (ec) return replies;

    std::vector<std::size_t> missing;
    for (std::size_t i = 0; i < replies.size(); ++i) {
        if (is_noscript(replies[i])) missing.push_back(i);
    }
    if (missing.empty()) return replies;
    // The server forgot the script (SCRIPT FLUSH, restart, failover): EVAL caches it again.
    commands.clear();
    for (const auto i : missing) commands.push_back(eval_command(calls[i], nkeys[i], false));
    auto retried = conn.pipeline(commands, ec, latest);
    if (ec) return {};
    for (std::size_t j = 0; j < missing.size(); ++j) replies[missing[j]] = std::move(retried[j]);
    return replies;
}

reply run_script(connection& conn, const script_call& call, std::error_code& ec) {
    auto replies = run_scripts(conn, {call}, ec);
    if (ec) return {};
    return std::move(replies.front());
}

void script_error(const script_call& call, const reply& r, const connection& conn, std::error_code& ec) {
    const auto where = "redis " + conn.settings().endpoint.describe() + ": " + std::string(call.which->name) +
                       " script on \"" + (call.keys.empty() ? std::string() : call.keys.front()) + "\": ";
    if (!r.is_error()) {
        return dlock::detail::fail(ec, errc::unexpected_reply,
                                   where + "unexpected " + to_string(r.type) + " reply");
    }
    // Script errors arrive wrapped ("ERR Error running script ... WRONGTYPE ..."), so search.
    if (r.text.find("WRONGTYPE") != std::string::npos) {
        return dlock::detail::fail(ec, errc::unexpected_reply, where + r.text);
    }
    dlock::detail::fail(ec, errc::server_error, where + r.text);
}

}  // namespace dlock::redis::detail
