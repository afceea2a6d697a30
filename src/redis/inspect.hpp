// backend::inspect on Redis: the read-only script src/redis/lua/inspect.lua, which knows the key
// layout of every lock kind, and the decoding of its answer into a dlock::lock_info.
#pragma once

#include <string>

#include <dlock/backend.hpp>
#include <dlock/redis/reply.hpp>

#include "redis/scripts.hpp"

namespace dlock::redis::detail {

/// The inspect script's call for the lock whose key is `lock_key` (every kind's keys are named
/// after it: protocol.cpp) and whose release channel is `channel`.
script_call inspect_call(const std::string& lock_key, const std::string& channel);

/// Decodes the script's reply into `out` (name, server and error left as they are). False, with
/// `why` set, when the reply is not what the script returns.
bool parse_inspect_reply(const reply& r, lock_info& out, std::string& why);

}  // namespace dlock::redis::detail
