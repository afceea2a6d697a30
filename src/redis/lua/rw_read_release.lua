-- Shared mutex, read side: give back a reader share (docs/lock-family.md).
-- KEYS as rw_read_acquire; ARGV[1] reader token, ARGV[2] release channel, ARGV[3] lease of a
-- hand-off grant in ms, ARGV[5] the fence counter's idle period in ms (lib/fence.lua).
-- Returns 1 when our live share was removed, 0 when it was gone or had expired. When it was the
-- last live share and no writer holds the lock, the first live waiting writer gets it at once:
-- SET writer PX ARGV[3], INCR fence, PUBLISH "granted <fence> <ticket> <its token>" on its
-- client's hand-off channel (lib/queue.lua, dlock_publish_grant).
--@flags allow-oom
--@include lib/fence.lua
--@include lib/notify.lua
--@include lib/queue.lua
local now = dlock_now_ms()
local expiry = redis.call('ZSCORE', KEYS[3], ARGV[1])
local ours = 0
if expiry then
  if tonumber(expiry) >= now then ours = 1 end
  redis.call('ZREM', KEYS[3], ARGV[1])
end

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
local dead = dlock_purge_dead(KEYS[4], KEYS[5], now)

if redis.call('ZCARD', KEYS[3]) == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  local head = first[1]
  if head then
    local bad = dlock_hand_off(KEYS[1], KEYS[2], KEYS[4], KEYS[5], head, first[2], ARGV[3], ARGV[2],
                               ARGV[5])
    if bad then return bad end
  elseif dead > 0 then
    dlock_notify(ARGV[2], 'released')  -- the writers readers waited for are dead
  end
end
return ours
