-- Shared mutex, write side: take the lock, or join / refresh our place among the waiting writers
-- (docs/lock-family.md, writer preference, writers first come first served).
-- KEYS[1] writer (string: token, PX lease), KEYS[2] fence counter, KEYS[3] readers (ZSET reader
-- token -> expiry, server ms), KEYS[4] waiting writers (ZSET token -> arrival number), KEYS[5]
-- their liveness (ZSET token -> deadline, server ms), KEYS[6] arrival counter.
-- ARGV[1] token, ARGV[2] lease ms, ARGV[5] waiter liveness ms, ARGV[6] release channel, ARGV[8]
-- the highest ticket this waiter was told so far (0: none), ARGV[10] the fence counter's idle
-- period in ms (lib/fence.lua).
-- Returns {1, fencing token} when we own the lock, else {0, ms, ticket}: re-check within ms (the
-- writer's PTTL, or the time until the last live share expires; -1: unknown); ticket names our
-- queue entry, and a hand-off to it publishes "granted <fence> <ticket> <token>". Idempotent: a waiter
-- calls it again to refresh its liveness, and that call is the bounded re-check that finds a
-- hand-off whose notification was lost.
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

local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  -- Handed to us while we waited. While a writer holds the lock no grant moves the counter, so
  -- the counter is our fencing token.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
dlock_purge_dead(KEYS[4], KEYS[5], now)

if not owner and redis.call('ZCARD', KEYS[3]) == 0 then
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if not head or head == ARGV[1] then
    local fence, bad = dlock_grant(KEYS[1], KEYS[2], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[10])
    if bad then return bad end
    return {1, fence}
  end
end

-- Join once.
local liveness = tonumber(ARGV[5])
local ticket = dlock_join_queue(KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[8], now, liveness)

if owner then
  return {0, redis.call('PTTL', KEYS[1]), ticket}
end
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if last[1] then
  return {0, math.max(1, tonumber(last[2]) - now + 1), ticket}
end
return {0, -1, ticket}  -- a live writer ahead of us takes it first
