-- Fair mutex: release with direct hand-off, and a waiter leaving the queue (docs/lock-family.md).
-- KEYS as fair_acquire.lua. ARGV[1] token, ARGV[2] release channel, ARGV[3] hand-off lease ms.
-- The next live waiter becomes the owner here, with a fresh fencing token and a short lease, and
-- is told on its own channel (<release channel>:<its token>) with "granted <fencing token>": one
-- notification, one winner, no extra round trip. Without waiters the key goes and 'released' is
-- published on the release channel.
-- Returns 1 when we held the lock (it was released or handed over), 0 otherwise (a waiter that
-- leaves the queue, or a grant already lost: nothing of anyone else's is touched).
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not head then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], 'released')
    return 1
  end
  local deadline = tonumber(redis.call('HGET', KEYS[4], head) or '0')
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[4], head)
  if deadline >= now then
    local fence = redis.call('INCR', KEYS[2])
    redis.call('SET', KEYS[1], head, 'PX', ARGV[3])
    redis.call('PUBLISH', ARGV[2] .. ':' .. head, 'granted ' .. fence)
    return 1
  end
  -- A dead waiter (liveness passed): skip it.
end
