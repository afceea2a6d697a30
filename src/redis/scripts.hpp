// The Lua scripts of the Redis locks (src/redis/lua/*.lua, embedded at build time with their SHA1,
// and as one Redis Functions library) and their execution (docs/redis-lock.md, "Scripts: Redis
// Functions, EVALSHA as the fallback"): FCALL first; a server without the library gets it
// (FUNCTION LOAD) with the calls run by EVAL in the same second round; a connection whose server
// cannot (Redis 6, an ACL without FCALL or FUNCTION) uses EVALSHA, and EVAL on NOSCRIPT. So
// FUNCTION FLUSH, SCRIPT FLUSH and restarts are survived without an extra round trip in the
// common case. Scripts can run on several servers at once.
#pragma once

#include <memory>
#include <span>
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
    std::string_view function;  ///< its name in the library (FCALL)
};

/// The Redis Functions library of every embedded script (FUNCTION LOAD's argument).
std::string_view functions_library() noexcept;

/// The embedded script src/redis/lua/<name>.lua; nullptr when there is none.
const script* find_script(std::string_view name) noexcept;

const script& raise_fence_script() noexcept;

/// Every embedded script.
const std::vector<script>& all_scripts() noexcept;

struct script_call {
    const script* which;
    std::vector<std::string> keys;
    std::vector<std::string> args;
};

/// One server's batch of script calls in run_everywhere.
struct script_batch {
    connection* conn = nullptr;
    /// Shared, because every server of a fan-out runs the same calls (10,000 renewals x N).
    std::shared_ptr<const std::vector<script_call>> calls{};
    steady::time_point deadline{};
    /// Have the server write the messages the calls publish before their replies: a PING goes
    /// ahead of them (its reply is dropped). redis-server writes, after each pass of its event
    /// loop, the client that got output last first; a client that already has output (the PING's
    /// reply) keeps its place behind the subscribers the calls published to. A release hands the
    /// lock on: the next holder's grant is then on its way before the releaser hears back.
    bool messages_first = false;
    std::vector<reply> replies{};  ///< one per call, on success
    std::error_code ec{};          ///< transport/protocol/auth failure
    std::string error{};           ///< its message, naming the server
};

/// Runs every batch at once (one pipeline per server, all written before any reply is awaited);
/// calls whose function or script the server lacks are re-sent with EVAL in a second round on
/// those servers only (after FUNCTION LOAD of the library, for FCALL's).
/// Error replies (e.g. WRONGTYPE) are returned as replies.
void run_everywhere(std::span<script_batch> batches);

/// One server: run_everywhere with one batch. `latest` cuts the connection's default deadline.
std::vector<reply> run_scripts(connection& conn, const std::vector<script_call>& calls,
                               std::error_code& ec,
                               steady::time_point latest = steady::time_point::max());
reply run_script(connection& conn, const script_call& call, std::error_code& ec);

/// Maps a script's error reply to an errc with a message naming the server, the script and the
/// server's text: WRONGTYPE -> unexpected_reply, anything else -> server_error.
void script_error(const script_call& call, const reply& r, const connection& conn,
                  std::error_code& ec);

}  // namespace dlock::redis::detail
