-- Shared mutex, read side: the watchdog's renewal of one reader share (docs/lock-family.md).
-- KEYS[3] readers (ZSET reader token -> expiry, server ms); ARGV[1] reader token, ARGV[2] new
-- lease in ms.
-- Returns 1 when extended, 0 when the share is gone or expired (a writer may have been let in
-- since: the share is removed and must not come back).
--@flags allow-oom
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not expiry then
  return 0
end
if tonumber(expiry) < now then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 0
end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], 'XX', now + lease, ARGV[1])
if redis.call('PTTL', KEYS[3]) < lease then
  redis.call('PEXPIRE', KEYS[3], lease)
end
return 1
