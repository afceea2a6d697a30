// The Lua scripts of the Redis lock (src/redis/lua/*.lua, embedded at build time with their SHA1)
// and their execution: EVALSHA first, EVAL on NOSCRIPT, so SCRIPT FLUSH and restarts are survived
// without an extra round trip in the common case.
#pragma once

#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/redis/reply.hpp>

#include "redis/connection.hpp"

namespace dlock::redis::detail {

struct script {
    std::string_view name;
    std::string_view source;
    std::string_view sha1;
};

const script& acquire_script() noexcept;
const script& release_script() noexcept;
const script& renew_script() noexcept;

struct script_call {
    const script* which;
    std::vector<std::string> keys;
    std::vector<std::string> args;
};

/// Runs every call in one pipeline; calls answered NOSCRIPT are re-sent with EVAL in a second one.
/// Error replies (e.g. WRONGTYPE) are returned as replies.
std::vector<reply> run_scripts(connection& conn, const std::vector<script_call>& calls, std::error_code& ec,
                               steady::time_point latest = steady::time_point::max());
reply run_script(connection& conn, const script_call& call, std::error_code& ec);

/// Maps a script's error reply to an errc with a message naming the script and the server's text:
/// WRONGTYPE -> unexpected_reply, anything else -> server_error.
void script_error(const script_call& call, const reply& r, const connection& conn, std::error_code& ec);

}  // namespace dlock::redis::detail
