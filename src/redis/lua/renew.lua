-- Compare-and-extend, the watchdog's renewal (docs/redis-lock.md).
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] new lease in ms.
-- Returns 1 when extended, 0 when the key is gone, -1 when it holds another owner's token (the
-- client reports the loss as deleted or taken over).
--@flags allow-oom
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then
  return -1
end
return 0
