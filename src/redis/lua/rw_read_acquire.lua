-- Shared mutex, read side: take a reader share (docs/lock-family.md, writer preference).
-- KEYS[1] writer (string: token, PX lease), KEYS[2] fence counter, KEYS[3] readers (ZSET reader
-- token -> expiry, server ms), KEYS[4] waiting writers (ZSET token -> arrival number), KEYS[5]
-- their liveness (ZSET token -> deadline, server ms), KEYS[6] arrival counter.
-- ARGV[1] reader token, ARGV[2] lease ms, ARGV[6] release channel, ARGV[10] the fence counter's
-- idle period in ms (lib/fence.lua).
-- Returns {1, fencing token} when admitted: no writer holds the lock and no live writer waits.
-- Otherwise {0, ms}: re-check within ms (the writer's PTTL, or the time until the earliest
-- waiting writer's liveness deadline; -1: unknown).
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
--@include lib/kind_guard.lua
--@include lib/fence.lua
--@include lib/notify.lua
--@include lib/queue.lua
local refused = dlock_kind_guard(KEYS[1], 'dlock::shared_mutex')
if refused then return refused end
for _, k in ipairs({{KEYS[1], 'string'}, {KEYS[3], 'zset'}}) do
  local t = redis.call('TYPE', k[1]).ok
  if t ~= 'none' and t ~= k[2] then
    return redis.error_reply('WRONGTYPE lock key ' .. k[1] .. ' holds a ' .. t .. ', not a ' ..
                             'shared_mutex ' .. k[2])
  end
end
local now = dlock_now_ms()

-- Expired shares and dead waiting writers (liveness deadline passed) no longer count.
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
dlock_purge_dead(KEYS[4], KEYS[5], now)

if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
if first[1] then
  -- Writer preference: a live writer waits, so we wait too. Its death shows at its deadline.
  return {0, math.max(1, tonumber(first[2]) - now + 1)}
end

-- The token before ZADD: if the counter is unusable nothing has been taken yet.
local fence, bad = dlock_next_fence(KEYS[2], ARGV[10], ARGV[2])
if not fence then return bad end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[3]) < lease then
  redis.call('PEXPIRE', KEYS[3], lease)  -- the key outlives its longest share, no more
end
return {1, fence}
