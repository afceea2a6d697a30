-- How scripts notify waiters (docs/redis-lock.md, "Scripts: Redis Functions, EVALSHA as the
-- fallback"): composed into every script that publishes at build time (cmake/embed_lua.cmake),
-- so the command that carries a notification is named here only (sharded pub/sub, SPUBLISH, is a
-- change of this file and of the subscriber's SUBSCRIBE). Scripts that include lib/queue.lua
-- include this file before it.

-- Sends `message` on channel `channel` to whoever is subscribed to it.
local function dlock_notify(channel, message)
  redis.call('PUBLISH', channel, message)
end

-- A release that hands the lock to nobody: lock key `key` goes, and 'released' is published on
-- release channel `channel` (docs/redis-lock.md, "Release"). A release that hands the lock on
-- publishes the grant instead. Returns 1, the release's reply.
local function dlock_release_to_nobody(key, channel)
  redis.call('DEL', key)
  dlock_notify(channel, 'released')
  return 1
end
