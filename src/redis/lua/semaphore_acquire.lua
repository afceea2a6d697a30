-- Take ARGV[3] permits of a permit-expirable semaphore in one round trip (docs/lock-family.md,
-- "counting_semaphore"). Each grant is one member of the holders ZSET with its own expiry, so the
-- permits of a crashed client come back when its lease runs out.
-- KEYS[1] holders: ZSET grant token -> expiry (server ms); KEYS[2] fence counter;
-- KEYS[3] counts: HASH grant token -> permits it holds; KEYS[4] limit: the number of permits.
-- ARGV[1] grant token, ARGV[2] lease in ms, ARGV[3] count, ARGV[4] the limit to set when none is
-- set yet; ARGV[5..9] (liveness, release channel, re-enter, ...) are unused: waiters are not
-- queued; ARGV[10] the idle period in ms after which the fence counter (lib/fence.lua) and the
-- limit (lib/semaphore.lua) go once no grant is live.
-- Returns {1, fencing token} when granted, else {0, ms until the earliest held permit expires}
-- (-1 when none is held, e.g. the limit was lowered below the count: wait for set_permits).
-- When the limit recorded on the server differs from ARGV[4], the reply has two more elements,
-- 0 and that limit ({granted, token or ms, 0, recorded limit}), so the client can say so.
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
--@include lib/kind_guard.lua
--@include lib/fence.lua
--@include lib/semaphore.lua
local refused = dlock_kind_guard(KEYS[1], 'dlock::counting_semaphore')
if refused then return refused end
for i, want in ipairs({'zset', 'string', 'hash', 'string'}) do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[i] .. ' holds a ' .. t ..
                             ', not a ' .. want .. ' (is the name used by another lock kind?)')
  end
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Purge the grants whose lease ran out (crashed or paused holders).
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, token in ipairs(expired) do
  redis.call('ZREM', KEYS[1], token)
  redis.call('HDEL', KEYS[3], token)
end

local limit = redis.call('GET', KEYS[4])
if not limit then
  redis.call('SET', KEYS[4], ARGV[4])
  limit = ARGV[4]
end
limit = tonumber(limit)
if not limit then
  return redis.error_reply('WRONGTYPE semaphore limit ' .. KEYS[4] .. ' is not a number')
end

-- The reply, with the recorded limit when it is not the one this caller assumed.
local function answer(granted, value)
  dlock_keep_limit(KEYS[1], KEYS[4], now, ARGV[10])
  if limit ~= tonumber(ARGV[4]) then return {granted, value, 0, limit} end
  return {granted, value}
end

local held = 0
for _, permits in ipairs(redis.call('HVALS', KEYS[3])) do
  held = held + (tonumber(permits) or 0)
end
local count = tonumber(ARGV[3])
if held + count <= limit then
  -- The token first: if the counter is unusable nothing has been taken yet.
  local fence, bad = dlock_next_fence(KEYS[2], ARGV[10], ARGV[2])
  if not fence then return bad end
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], count)
  -- Both keys live as long as their longest grant; the limit and the fence counter that long
  -- plus the idle period.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], last[2])
  redis.call('PEXPIREAT', KEYS[3], last[2])
  return answer(1, fence)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then
  return answer(0, -1)
end
return answer(0, math.max(1, tonumber(first[2]) - now))
