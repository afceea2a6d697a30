// backend::watch on Redis and Redlock: one connection per server that the server tells about
// every write to the lock's keys. CLIENT TRACKING ON REDIRECT <its own id> BCAST PREFIX <lock key>
// (Redis 6+) makes the server publish an invalidation on __redis__:invalidate for each write,
// delete or expiry of a key starting with the lock key, which is every key of every lock kind of
// that name (they are all "<lock key>" or "<lock key>:<suffix>": protocol.cpp). It needs no
// server configuration (unlike keyspace notifications) and adds nothing to the lock scripts. A
// server that refuses CLIENT TRACKING (older, or an ACL without it) is watched on the release
// channel, and the watch then reports a change at least once a second.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <dlock/backend.hpp>

#include "redis/node.hpp"

namespace dlock::redis::detail {

/// A watch of the keys starting with `lock_key` on every node of `servers` (at its current
/// address; a node that moved is reconnected when its connection fails); `channel` is the lock's
/// release channel (the fallback). Subscribes before returning; null and `ec` set when no server
/// could be subscribed.
std::unique_ptr<dlock::lock_watch> make_watch(const std::vector<std::shared_ptr<node>>& servers,
                                              const std::string& lock_key,
                                              const std::string& channel, std::error_code& ec);

}  // namespace dlock::redis::detail
