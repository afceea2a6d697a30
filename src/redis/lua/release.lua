-- Compare-and-delete, then wake (docs/redis-lock.md, "Waking one waiter").
-- KEYS as acquire.lua (KEYS[3..7] may be absent: nobody registers); ARGV[1] owner token, ARGV[2]
-- release channel.
-- 'released' goes to the release channel (watchers, Redlock and recursive waiters listen there),
-- and the live head of the mutex waiters is told "wake <its id>" on its client's hand-off channel:
-- one registered waiter wakes, not every waiting process. If the previous wake-up went to the
-- same head (KEYS[7] names it) and it is still queued, it lost a race or has not run yet: the
-- free lock is first reserved for it as its turn (KEYS[6], lib/queue.lua, dlock_mutex_turn_ms).
-- Returns 1 when our grant was deleted, 0 when the key is gone, -1 when it holds another owner's
-- token (nothing is touched then).
-- Redlock (no KEYS[6..7]: no turns) hands the key to the node's live head instead of waking it
-- (lib/queue.lua, dlock_hand_mutex_head; ARGV[3] the hand-off lease ms, ARGV[5] the fence counter's
-- idle period ms). It also gets ARGV[6], the waiter id the caller registered under ('' : none;
-- a holder's release, or the undo of a split vote). A quorum granted it, but a server that
-- answered "held" still has that id queued, maybe at its head, where it would be handed the key
-- meant for the next waiter: the id goes on every server, and where the key is already gone (our
-- grant missed that server) it goes to the next live head as by a release (docs/redlock.md,
-- "Waiting").
-- Without registered waiters (no KEYS[3]) the waiter functions are never defined: each function a
-- script defines is made anew on every call (docs/redis-lock.md, "Release").
--@include lib/notify.lua
local holder = redis.call('GET', KEYS[1])
local id = ARGV[6]
if id == '' or not KEYS[4] or KEYS[7] then id = nil end
if holder ~= ARGV[1] then
  if not id then
    if holder then return -1 end
    return 0
  end
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  if holder then return -1 end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    --@include lib/fence.lua
    --@include lib/queue.lua
    local bad = dlock_hand_mutex_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[5])
    if bad then return bad end
  end
  return 0
end
redis.call('DEL', KEYS[1])
dlock_notify(ARGV[2], 'released')
if id then
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end
if not KEYS[4] or redis.call('EXISTS', KEYS[3]) == 0 then return 1 end
--@include lib/fence.lua
--@include lib/queue.lua
if KEYS[7] then
  dlock_wake_mutex_head(KEYS[3], KEYS[4], ARGV[2], KEYS[6], KEYS[7])
  return 1
end
local bad = dlock_hand_mutex_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[5])
if bad then return bad end
return 1
