-- Give back one grant's permits, then wake the waiters (docs/lock-family.md, "counting_semaphore").
-- KEYS as semaphore_acquire (holders ZSET, fence, counts HASH, limit); ARGV[1] grant token,
-- ARGV[2] release channel (ARGV[3], the hand-off lease, and ARGV[4] are unused: waiters are not
-- queued), ARGV[5] the idle period in ms (lib/semaphore.lua: the limit goes that long after the
-- last grant).
-- Returns 1 when our live grant was removed, 0 when it is gone or its lease had run out (an
-- expired entry is removed too; it no longer counted as ours). Never touches another grant.
--@flags allow-oom
--@include lib/semaphore.lua
--@include lib/notify.lua
local holders_type = redis.call('TYPE', KEYS[1]).ok
if holders_type ~= 'none' and holders_type ~= 'zset' then
  return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[1] .. ' holds a ' .. holders_type ..
                           ', not a zset')
end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
dlock_notify(ARGV[2], 'released')
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
dlock_keep_limit(KEYS[1], KEYS[4], now, ARGV[5])
if tonumber(expiry) <= now then
  return 0
end
return 1
