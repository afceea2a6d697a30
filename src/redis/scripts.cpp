#include "redis/scripts.hpp"

#include <cstdlib>

#include "core/status.hpp"

namespace dlock::redis::detail {
namespace lua {
struct embedded_script {
    std::string_view name, text, sha1, function;
};
extern const embedded_script embedded[];
extern const std::size_t embedded_count;
extern const std::string_view library;
}  // namespace lua

std::string_view functions_library() noexcept { return lua::library; }

const std::vector<script>& all_scripts() noexcept {
    // Built once from the generated table (cmake/embed_lua.cmake); a handful of entries.
    static const std::vector<script> all = [] {
        std::vector<script> v;
        for (std::size_t i = 0; i < lua::embedded_count; ++i) {
            const auto& e = lua::embedded[i];
            v.push_back({e.name, e.text, e.sha1, e.function});
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

/// How a call is sent: by its function's name, by its script's SHA1, or with the script's text.
enum class send_as { fcall, evalsha, eval };

/// The command for `call`; `nkeys` keeps the key count's text alive.
command_args script_command(const script_call& call, std::string& nkeys, send_as how) {
    nkeys = std::to_string(call.keys.size());
    command_args c;
    c.reserve(3 + call.keys.size() + call.args.size());
    switch (how) {
        case send_as::fcall:
            c.push_back("FCALL");
            c.push_back(call.which->function);
            break;
        case send_as::evalsha:
            c.push_back("EVALSHA");
            c.push_back(call.which->sha1);
            break;
        case send_as::eval:
            c.push_back("EVAL");
            c.push_back(call.which->source);
            break;
    }
    c.push_back(nkeys);
    for (const auto& k : call.keys) c.push_back(k);
    for (const auto& a : call.args) c.push_back(a);
    return c;
}

bool is_noscript(const reply& r) noexcept { return r.is_error() && r.text.starts_with("NOSCRIPT"); }

/// The server has no such function (never loaded, FUNCTION FLUSH, a restart without persistence):
/// nothing ran.
bool is_function_missing(const reply& r) noexcept {
    return r.is_error() && r.text.starts_with("ERR Function not found");
}

/// The server will not run FCALL at all: Redis 6 does not know it, an ACL may deny it (the denial
/// names the command; a denied key is named otherwise and is the script's own error). Nothing ran.
bool is_fcall_refused(const reply& r) noexcept {
    return r.is_error() && (r.text.starts_with("ERR unknown command") || refuses_functions(r.text));
}

}  // namespace

void run_everywhere(std::span<script_batch> batches) {
    std::vector<std::vector<std::string>> nkeys(batches.size());
    std::vector<exchange> first(batches.size());
    std::vector<bool> by_function(batches.size());
    for (std::size_t b = 0; b < batches.size(); ++b) {
        auto& batch = batches[b];
        by_function[b] = !batch.conn->functions_refused();
        const auto how = by_function[b] ? send_as::fcall : send_as::evalsha;
        nkeys[b].resize(batch.calls->size());
        first[b].conn = batch.conn;
        first[b].deadline = batch.deadline;
        if (batch.messages_first) first[b].commands.push_back({"PING"});
        for (std::size_t i = 0; i < batch.calls->size(); ++i) {
            first[b].commands.push_back(script_command((*batch.calls)[i], nkeys[b][i], how));
        }
    }
    exchange_all(first);

    // The server lacks the library or a script (FUNCTION FLUSH, SCRIPT FLUSH, restart, failover,
    // a server new to this build), or will not run functions: those calls ran nowhere, and go
    // again with EVAL, which needs nothing loaded. A missing library is loaded in the same round,
    // ahead of them, so the next calls find it; a server that refuses it, or FCALL itself, gets
    // EVALSHA on this connection from now on.
    struct retry {
        std::size_t batch;
        bool loads;                        // the exchange starts with FUNCTION LOAD
        std::vector<std::size_t> calls{};  // call indexes
    };
    std::vector<exchange> second;
    std::vector<retry> retried;
    for (std::size_t b = 0; b < batches.size(); ++b) {
        auto& batch = batches[b];
        batch.ec = first[b].ec;
        batch.error = std::move(first[b].error);
        batch.replies = std::move(first[b].replies);
        if (batch.ec) continue;
        // The PING's reply, whatever it is (an ACL without +ping refuses it): the calls count.
        if (batch.messages_first) batch.replies.erase(batch.replies.begin());
        retry r{b, false};
        for (std::size_t i = 0; i < batch.replies.size(); ++i) {
            const auto& reply = batch.replies[i];
            if (!by_function[b]) {
                if (is_noscript(reply)) r.calls.push_back(i);
            } else if (is_fcall_refused(reply)) {
                batch.conn->refuse_functions();
                r.calls.push_back(i);
            } else if (is_function_missing(reply)) {
                r.loads = true;
                r.calls.push_back(i);
            }
        }
        if (r.calls.empty()) continue;
        r.loads = r.loads && !batch.conn->functions_refused();
        exchange x{batch.conn, {}, batch.deadline};
        if (r.loads) x.commands.push_back({"FUNCTION", "LOAD", "REPLACE", functions_library()});
        for (const auto i : r.calls)
            x.commands.push_back(script_command((*batch.calls)[i], nkeys[b][i], send_as::eval));
        second.push_back(std::move(x));
        retried.push_back(std::move(r));
    }
    if (second.empty()) return;
    exchange_all(second);
    for (std::size_t k = 0; k < second.size(); ++k) {
        const auto& r = retried[k];
        auto& batch = batches[r.batch];
        if (second[k].ec) {
            batch.ec = second[k].ec;
            batch.error = std::move(second[k].error);
            batch.replies.clear();
            continue;
        }
        auto& replies = second[k].replies;
        // A library the server will not load (an ACL without FUNCTION, out of memory): the calls
        // ran by EVAL all the same; this connection stops asking.
        if (r.loads && replies.front().is_error()) batch.conn->refuse_functions();
        const std::size_t skip = r.loads ? 1 : 0;
        for (std::size_t j = 0; j < r.calls.size(); ++j)
            batch.replies[r.calls[j]] = std::move(replies[skip + j]);
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
