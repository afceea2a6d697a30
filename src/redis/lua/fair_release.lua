-- Fair mutex: release with direct hand-off, and a waiter leaving the queue (docs/lock-family.md).
-- KEYS as fair_acquire.lua. ARGV[1] token, ARGV[2] release channel, ARGV[3] hand-off lease ms,
-- ARGV[5] the fence counter's idle period in ms (lib/fence.lua).
-- The next live waiter becomes the owner here, with a fresh fencing token and a short lease, and
-- is told on its client's hand-off channel with "granted <fencing token> <ticket> <its token>",
-- the ticket of the queue entry granted (lib/queue.lua, dlock_publish_grant): one notification,
-- one winner, no extra round trip. Without waiters the key goes and 'released' is published on the release channel.
-- Returns 1 when we held the lock (it was released or handed over), 0 otherwise (a waiter that
-- leaves the queue, or a grant already lost: nothing of anyone else's is touched).
-- The holder's release reads the key and the queue's head first: without a head nobody waits, and
-- the key goes before the queue functions are even defined (each function a script defines is
-- made anew on every call).
--@flags allow-oom
--@include lib/notify.lua
local holder = redis.call('GET', KEYS[1])
local first = nil
if holder == ARGV[1] then
  first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if not first[1] then return dlock_release_to_nobody(KEYS[1], ARGV[2]) end
end
--@include lib/fence.lua
--@include lib/queue.lua
if holder ~= ARGV[1] then
  -- A waiter that leaves the queue, or a grant already lost.
  redis.call('ZREM', KEYS[3], ARGV[1])
  if redis.call('TYPE', KEYS[4]).ok == 'hash' then
    redis.call('DEL', KEYS[4])  -- the liveness layout of earlier versions: those waiters re-join
  else
    redis.call('ZREM', KEYS[4], ARGV[1])
  end
  return 0
end
-- We hold it, so we are not queued: a grant takes its entry off (dlock_grant), and a holder's
-- refresh returns before it would join (fair_acquire.lua); an entry of ours is dropped all the
-- same. The live head gets the lock (dead waiters before it are purged, a liveness hash of
-- earlier versions dropped: dlock_live_head). One TIME for it and the fence.
local now_us = dlock_now_us()
local head, ticket = dlock_live_head(KEYS[3], KEYS[4], math.floor(now_us / 1000), ARGV[1], false,
                                     first)
if not head then return dlock_release_to_nobody(KEYS[1], ARGV[2]) end
-- dlock_grant takes the head off the queue and its liveness.
local bad = dlock_hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, ticket, ARGV[3], ARGV[2],
                           ARGV[5], now_us)
if bad then return bad end
return 1
