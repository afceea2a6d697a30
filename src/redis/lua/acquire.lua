-- Take the lock in one round trip (docs/redis-lock.md).
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] owner token, ARGV[2] lease in ms.
-- Returns {1, fencing token} when granted, {0, holder's remaining ms (-1: no expiry)} when held.
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
--@include lib/kind_guard.lua
local refused = dlock_kind_guard(KEYS[1], 'dlock::mutex')
if refused then return refused end
local held = redis.call('TYPE', KEYS[1]).ok
if held ~= 'none' then
  if held ~= 'string' then
    return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. held .. ', not a lock')
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
-- INCR before SET: if the counter is unusable nothing has been taken yet.
local fence = redis.pcall('INCR', KEYS[2])
if type(fence) == 'table' and fence.err then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ': ' .. fence.err)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
