-- Fair mutex: take the lock, or join / refresh our place in the FIFO queue (docs/lock-family.md).
-- KEYS[1] owner (string: holder token, PX lease), KEYS[2] fence counter, KEYS[3] queue (ZSET
-- waiter token -> ticket, its arrival number), KEYS[4] liveness (ZSET waiter token -> deadline,
-- server ms), KEYS[5] arrival counter.
-- ARGV[1] token, ARGV[2] lease ms, ARGV[5] waiter liveness ms, ARGV[6] release channel, ARGV[8]
-- the highest ticket this waiter was told so far (0: none), ARGV[10] the fence counter's idle
-- period in ms (lib/fence.lua).
-- Returns {1, fencing token} when we own the lock, {0, holder's remaining ms (-1: none), our
-- ticket} when we wait. Idempotent: a waiter calls it again to refresh its liveness, and it is the
-- bounded re-check that finds a hand-off whose notification was lost. A hand-off publishes
-- "granted <fence> <ticket> <token>": the ticket names the queue entry (so the refresh) it answers.
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
-- A free name comes first and returns before the queue functions are even defined (each function
-- a script defines is made anew on every call; docs/redis-lock.md, "Acquire in one round trip").
--@include lib/kind_guard.lua
--@include lib/fence.lua
local refused, free = dlock_kind_guard(KEYS[1], 'dlock::fair_mutex')
if refused then return refused end
if free then
  -- No owner, no queue, no liveness entries (KEYS[1], KEYS[3], KEYS[4] are the guard's <lock
  -- key>, :queue and :alive): the grant below, with nothing to take off the queue.
  local fence, bad = dlock_next_fence(KEYS[2], ARGV[10], ARGV[2])
  if not fence then return bad end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end
--@include lib/notify.lua
--@include lib/queue.lua
-- The guard read the lock key already (KEYS[1] is its <lock key>).
local held = dlock_guard_read.type
if held ~= 'none' and held ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. held .. ', not a lock')
end
-- (A liveness hash of earlier versions is dropped by the purge or the join: lib/queue.lua.)
local now_us = dlock_now_us()  -- one TIME for the queue's deadlines and a grant's fence
local now = math.floor(now_us / 1000)
local liveness = tonumber(ARGV[5])

local owner = dlock_guard_read.value
if owner == ARGV[1] then
  -- Handed to us while we waited. Only grants move the counter, so it still holds our token.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end

if not owner then
  -- The live head (dead waiters before it purged: dlock_live_head) goes first. A held name needs
  -- no purge to be joined: its release purges the dead it meets.
  local head, ticket = dlock_live_head(KEYS[3], KEYS[4], now)
  if not head or head == ARGV[1] then
    local fence, bad = dlock_grant(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[10],
                                   nil, now_us)
    if bad then return bad end
    return {1, fence}
  end
  -- Free, but an earlier waiter is first (its holder expired without a release): hand it over
  -- now rather than at that waiter's next refresh.
  local bad = dlock_hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, ticket, ARGV[5], ARGV[6],
                           ARGV[10], now_us)
  if bad then return bad end
end

-- Join once (the fence stays when the queue's keys go).
local ticket = dlock_join_queue(KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[8], now, liveness)
return {0, redis.call('PTTL', KEYS[1]), ticket}
