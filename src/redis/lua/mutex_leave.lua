-- A dlock::mutex waiter gives up (timeout, cancel, a failed wait): it leaves the mutex waiters
-- (docs/redis-lock.md, "Waking one waiter"). A turn reserved for it, or the mark that it was
-- woken, goes with it. If the lock is then free (no holder, no turn) it may have been woken and
-- not taken it, so the wake-up goes on to the next live head.
-- On Redlock (no turns) a node may have handed its key to the waiter meanwhile: it goes on to
-- the next live head (lib/queue.lua, dlock_hand_mutex_head).
-- KEYS as acquire.lua; ARGV[1] waiter id, ARGV[2] release channel, ARGV[3] hand-off lease ms,
-- ARGV[5] the fence counter's idle period ms. Returns 0 (it never holds the lock: a grant takes
-- it off the waiters).
--@include lib/fence.lua
--@include lib/notify.lua
--@include lib/queue.lua
if redis.call('TYPE', KEYS[3]).ok == 'zset' then redis.call('ZREM', KEYS[3], ARGV[1]) end
if redis.call('TYPE', KEYS[4]).ok == 'zset' then redis.call('ZREM', KEYS[4], ARGV[1]) end
local turn, woken = KEYS[6], KEYS[7]
if not woken then
  -- Redlock: a node may have handed us its key meanwhile (lib/queue.lua, dlock_hand_mutex_head);
  -- it goes on to the next live head, as does a key found free with waiters.
  if dlock_get_string(KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    local bad = dlock_hand_mutex_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[5])
    if bad then return bad end
  end
  return 0
end
if turn and dlock_get_string(turn) == ARGV[1] then redis.call('DEL', turn) end
if dlock_get_string(woken) == ARGV[1] then redis.call('DEL', woken) end
if redis.call('EXISTS', KEYS[1]) == 0 and not (turn and redis.call('EXISTS', turn) == 1) then
  dlock_wake_mutex_head(KEYS[3], KEYS[4], ARGV[2], turn, woken)
end
return 0
