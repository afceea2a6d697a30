-- Redlock's fencing write-back (docs/redlock.md): raise this node's counter to the grant's token,
-- unless the node holds another owner's lock key (then it must not count for this grant).
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] owner token, ARGV[2] fencing token.
-- Returns 1 when the counter is now >= the token, 0 when refused.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current == nil then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' is not a number')
end
if current < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
