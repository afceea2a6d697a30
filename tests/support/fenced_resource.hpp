// The protected resource of the fault tests: a Redis key that accepts a write only with a fencing
// token above every token it has seen (the check a real store does with a conditional update).
#pragma once

#include <cstdint>
#include <string>

#include <dlock/redis/client.hpp>

namespace dlock::test {

/// 1 if `token` was accepted (and recorded), 0 if a token at least as large was seen before.
inline long long fenced_write(dlock::redis::client& redis, const std::string& resource,
                              std::uint64_t token) {
    static const std::string script =
        "local seen = tonumber(redis.call('GET', KEYS[1]) or '0') "
        "if tonumber(ARGV[1]) > seen then redis.call('SET', KEYS[1], ARGV[1]) return 1 end "
        "return 0";
    return redis.command({"EVAL", script, "1", resource, std::to_string(token)}).integer;
}

}  // namespace dlock::test
