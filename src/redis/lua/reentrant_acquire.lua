-- Take or re-enter the recursive lock in one round trip (docs/lock-family.md, recursive_mutex).
-- KEYS[1] lock hash {<owner token>: depth, fence: fencing token}, KEYS[2] fence counter.
-- ARGV[1] owner token (32 hex chars, so it never collides with the field 'fence'), ARGV[2] lease
-- in ms, ARGV[3..6] unused (count, limit, liveness_ms, release channel), ARGV[7] reenter: "1" =
-- the owner already holds it and must not take it anew, ARGV[10] the fence counter's idle period
-- in ms (lib/fence.lua).
-- Returns {1, fencing token} when granted (depth 1, a new token) or re-entered (depth + 1, the
-- grant's token); {0, -1} when a re-entry finds the owner's grant gone (the engine reports
-- lock_lost); {0, holder's remaining ms (-1: no expiry)} when another owner holds it.
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
--@include lib/kind_guard.lua
--@include lib/fence.lua
local refused = dlock_kind_guard(KEYS[1], 'dlock::recursive_mutex')
if refused then return refused end
local held = redis.call('TYPE', KEYS[1]).ok
if held ~= 'none' and (held ~= 'hash' or redis.call('HEXISTS', KEYS[1], 'fence') == 0) then
  return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. held ..
                           ', not a recursive lock')
end
if held == 'hash' then
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    -- Never shorten the lease: the outer levels' validity counts on the longest one they were
    -- granted (a key without expiry gets one).
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
  end
  if ARGV[7] == '1' then
    return {0, -1}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if ARGV[7] == '1' then
  return {0, -1}  -- our grant expired or was deleted: re-entry never takes the lock anew
end
-- The token before HSET: if the counter is unusable nothing has been taken yet.
local fence, bad = dlock_next_fence(KEYS[2], ARGV[10], ARGV[2])
if not fence then return bad end
redis.call('HSET', KEYS[1], ARGV[1], 1, 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence}
