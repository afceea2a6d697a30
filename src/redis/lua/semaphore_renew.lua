-- Extend one grant of a semaphore, the watchdog's renewal (docs/lock-family.md,
-- "counting_semaphore").
-- KEYS as semaphore_acquire (holders ZSET, fence, counts HASH, limit); ARGV[1] grant token,
-- ARGV[2] new lease in ms, ARGV[3] the idle period in ms (lib/semaphore.lua: the limit is kept
-- that long after the last grant).
-- Returns 1 when extended, 0 when the grant is gone or its lease already ran out (then its permits
-- may have been granted to someone else; the expired entry is removed).
--@flags allow-oom
--@include lib/semaphore.lua
local holders_type = redis.call('TYPE', KEYS[1]).ok
if holders_type ~= 'none' and holders_type ~= 'zset' then
  return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[1] .. ' holds a ' .. holders_type ..
                           ', not a zset')
end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if tonumber(expiry) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[3], last[2])
dlock_keep_limit(KEYS[1], KEYS[4], now, ARGV[3])
return 1
