-- Compare-and-delete, then hand on (docs/redis-lock.md, "Waking one waiter").
-- KEYS as acquire.lua (KEYS[3..5] may be absent: nobody registers); ARGV[1] owner token, ARGV[2]
-- release channel, ARGV[3] the hand-off lease ms, ARGV[5] the fence counter's idle period ms,
-- ARGV[6] the waiter id the caller registered under ('' : none), ARGV[7] '0' for Redlock's fence
-- counters (no clock floor; lib/fence.lua).
-- The key goes to the live head of the mutex waiters (lib/queue.lua, dlock_hand_mutex_head), which
-- is told "granted <fence> <ticket> <its id>" on its client's hand-off channel: one registered
-- waiter gets the lock, no waiting process races it. With no live head the key is deleted and
-- 'released' goes to the release channel (lib/notify.lua, dlock_release_to_nobody).
-- Returns 1 when our grant was released (deleted or handed on), 0 when the key is gone, -1 when it
-- holds another owner's token (nothing is touched then).
-- Redlock: ARGV[6] names the id the holder registered under (a holder's release, or the undo of
-- a split vote). A quorum granted it, but a server that answered "held" still has that id queued,
-- maybe at its head, where it would be handed the key meant for the next waiter: the id goes on
-- every server, and where the key is already gone (our grant missed that server) it goes to the
-- next live head as by a release (docs/redlock.md, "Waiting"). On one server a grant takes the id
-- off, so ARGV[6] is ''.
-- A key found free is handed on only while no other kind holds the name (readers may have come
-- once it ran out: registered mutex waiters do not keep them out).
-- Without registered waiters (no KEYS[3]) the waiter functions are never defined: each function a
-- script defines is made anew on every call (docs/redis-lock.md, "Release").
--@flags allow-oom
--@include lib/notify.lua
local holder = redis.call('GET', KEYS[1])
local id = ARGV[6]
if id == '' or not KEYS[4] then id = nil end
if holder ~= ARGV[1] then
  if not id then
    if holder then return -1 end
    return 0
  end
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  if holder then return -1 end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    -- The key is free, and registered mutex waiters do not keep other kinds out: shared_mutex
    -- readers may hold the name now (lib/kind_guard.lua). Then nobody is handed the key.
    --@include lib/kind_guard.lua
    if dlock_name_kind(KEYS[1]) then return 0 end
    --@include lib/fence.lua
    --@include lib/queue.lua
    local bad = dlock_hand_mutex_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[5],
                                      ARGV[7])
    if bad then return bad end
  end
  return 0
end
if id then
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end
if not KEYS[4] then return dlock_release_to_nobody(KEYS[1], ARGV[2]) end
-- The queue's first entry, read once (no waiters, or waiters' keys of another type: done).
local first = redis.pcall('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if first.err or not first[1] then return dlock_release_to_nobody(KEYS[1], ARGV[2]) end
--@include lib/fence.lua
--@include lib/queue.lua
-- A live head gets our key as it is written over (the name is never free, as in a fair_mutex
-- hand-off: no DEL, no 'released', whose listeners a handed key does not concern).
local bad, handed = dlock_hand_mutex_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3],
                                          ARGV[5], ARGV[7], nil, first)
if bad then
  dlock_release_to_nobody(KEYS[1], ARGV[2])
  return bad
end
if not handed then return dlock_release_to_nobody(KEYS[1], ARGV[2]) end
return 1
