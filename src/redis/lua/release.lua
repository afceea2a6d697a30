-- Compare-and-delete, then wake the waiters (docs/redis-lock.md).
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] release channel.
-- Returns 1 when our grant was deleted, 0 when the key is gone, -1 when it holds another owner's
-- token (nothing is touched then).
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
if holder then
  return -1
end
return 0
