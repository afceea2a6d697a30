-- Redlock's fencing write-back (docs/redlock.md): raise this node's counter to the grant's token,
-- unless the node holds another owner's lock key (then it must not count for this grant).
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] owner token, ARGV[2] fencing token, ARGV[3]
-- the counter's idle period in ms, ARGV[4] the grant's lease in ms (lib/fence.lua: the counter
-- is kept that long; ARGV[3] absent: no expiry).
-- Returns 1 when the counter is now >= the token, 0 when refused.
--@include lib/fence.lua
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
local bad = dlock_raise_fence(KEYS[2], tonumber(ARGV[2]), ARGV[3], ARGV[4])
if bad then return bad end
return 1
