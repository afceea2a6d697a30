-- Fair mutex: take the lock, or join / refresh our place in the FIFO queue (docs/lock-family.md).
-- KEYS[1] owner (string: holder token, PX lease), KEYS[2] fence counter, KEYS[3] queue (ZSET
-- waiter token -> arrival number), KEYS[4] liveness (HASH waiter token -> deadline, server ms),
-- KEYS[5] arrival counter.
-- ARGV[1] token, ARGV[2] lease ms, ARGV[5] waiter liveness ms, ARGV[6] release channel.
-- Returns {1, fencing token} when we own the lock, {0, holder's remaining ms (-1: none)} when we
-- wait. Idempotent: a waiter calls it again to refresh its liveness, and it is the bounded
-- re-check that finds a hand-off whose notification was lost.
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
--@include lib/kind_guard.lua
local refused = dlock_kind_guard(KEYS[1], 'dlock::fair_mutex')
if refused then return refused end
local held = redis.call('TYPE', KEYS[1]).ok
if held ~= 'none' and held ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. held .. ', not a lock')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  -- Handed to us while we waited. Only grants move the counter, so it still holds our token.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end

-- Dead waiters (liveness deadline passed) lose their place.
local alive = redis.call('HGETALL', KEYS[4])
for i = 1, #alive, 2 do
  if tonumber(alive[i + 1]) < now then
    redis.call('ZREM', KEYS[3], alive[i])
    redis.call('HDEL', KEYS[4], alive[i])
  end
end

local fence_reply = function(f)
  if type(f) == 'table' and f.err then
    return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ': ' .. f.err)
  end
  return nil
end

if not owner then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not head or head == ARGV[1] then
    local fence = redis.pcall('INCR', KEYS[2])
    local bad = fence_reply(fence)
    if bad then return bad end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('HDEL', KEYS[4], ARGV[1])
    return {1, fence}
  end
  -- Free, but an earlier waiter is first (its holder expired without a release): hand it over
  -- now rather than at that waiter's next refresh.
  local fence = redis.pcall('INCR', KEYS[2])
  local bad = fence_reply(fence)
  if bad then return bad end
  redis.call('SET', KEYS[1], head, 'PX', ARGV[5])
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[4], head)
  redis.call('PUBLISH', ARGV[6] .. ':' .. head, 'granted ' .. fence)
end

if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[5]), ARGV[1])
end
redis.call('HSET', KEYS[4], ARGV[1], now + tonumber(ARGV[5]))
return {0, redis.call('PTTL', KEYS[1])}
