-- Shared mutex, write side: release, and also the "leave" of a waiting writer that gives up
-- (docs/lock-family.md).
-- KEYS as rw_write_acquire; ARGV[1] token, ARGV[2] release channel, ARGV[3] lease of a hand-off
-- grant in ms, ARGV[5] the fence counter's idle period in ms (lib/fence.lua).
-- Returns 1 when the writer key held our token (deleted), 0 otherwise. Either way we leave the
-- queue. Then, if no writer holds the lock and no live share remains, the first live waiting
-- writer gets it at once (SET writer PX ARGV[3], INCR fence, PUBLISH "granted <fence> <ticket>
-- <its token>" on its client's hand-off channel, lib/queue.lua); if no writer waits any more, PUBLISH "released" on ARGV[2] wakes the
-- waiting readers.
--@flags allow-oom
--@include lib/fence.lua
--@include lib/notify.lua
--@include lib/queue.lua
local now = dlock_now_ms()
local ours = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  ours = 1
end
local left = redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
local dead = dlock_purge_dead(KEYS[4], KEYS[5], now)

if redis.call('EXISTS', KEYS[1]) == 0 then
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  local head = first[1]
  if head and redis.call('ZCARD', KEYS[3]) == 0 then
    local bad = dlock_hand_off(KEYS[1], KEYS[2], KEYS[4], KEYS[5], head, first[2], ARGV[3], ARGV[2],
                               ARGV[5])
    if bad then return bad end
  elseif not head and (ours == 1 or left == 1 or dead > 0) then
    dlock_notify(ARGV[2], 'released')
  end
end
return ours
