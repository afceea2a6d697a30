-- The watchdog's renewal of one level of the recursive lock (docs/lock-family.md,
-- recursive_mutex). Every level of an owner is renewed by its own lease, so the key lives while
-- any level does.
-- KEYS[1] lock hash, KEYS[2] fence counter (unused); ARGV[1] owner token, ARGV[2] lease in ms.
-- Returns 1 when the key holds our token and now lives at least ARGV[2] ms (never shortened:
-- another level may count on a longer lease), 0 when it is gone, -1 when another owner holds it.
--@flags allow-oom
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
