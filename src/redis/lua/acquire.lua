-- Take the lock in one round trip (docs/redis-lock.md).
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3..5] the mutex waiters' queue, liveness and
-- arrival counter (lib/queue.lua, dlock_wake_mutex_head); ARGV[1] owner token, ARGV[2] lease in
-- ms, ARGV[5] waiter liveness ms, ARGV[9] waiter id (<kind>:<client>.<random>; empty or absent:
-- the caller does not register, e.g. a first attempt or Redlock).
-- Returns {1, fencing token} when granted, {0, holder's remaining ms (-1: no expiry)} when held.
-- When held, a waiter id joins the mutex waiters (or refreshes its liveness: the call is
-- idempotent); a grant takes it off.
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
--@include lib/kind_guard.lua
--@include lib/queue.lua
local refused = dlock_kind_guard(KEYS[1], 'dlock::mutex')
if refused then return refused end
local waiter = ARGV[9]
if waiter == '' or not KEYS[5] then waiter = nil end
local held = redis.call('TYPE', KEYS[1]).ok
if held ~= 'none' then
  if held ~= 'string' then
    return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. held .. ', not a lock')
  end
  if waiter then
    dlock_join_queue(KEYS[3], KEYS[4], KEYS[5], waiter, 0, dlock_now_ms(), tonumber(ARGV[5]))
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
-- INCR before SET: if the counter is unusable nothing has been taken yet.
local fence = redis.pcall('INCR', KEYS[2])
if type(fence) == 'table' and fence.err then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ': ' .. fence.err)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if waiter then
  redis.call('ZREM', KEYS[3], waiter)
  redis.call('ZREM', KEYS[4], waiter)
end
return {1, fence}
