-- Compare-and-extend, the watchdog's renewal (docs/redis-lock.md).
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] new lease in ms.
-- Returns 1 when extended, 0 when the key is gone or holds another owner's token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
