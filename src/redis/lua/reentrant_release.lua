-- Leave one level of the recursive lock; the last level deletes it and wakes the waiters
-- (docs/lock-family.md, recursive_mutex).
-- KEYS[1] lock hash, KEYS[2] fence counter (unused); ARGV[1] owner token, ARGV[2] release
-- channel, ARGV[3] unused (hand-off lease), ARGV[4] "1": the owner's last level, after a re-entry
-- whose outcome the client does not know (it may have landed late): release every level.
-- Returns 1 when one of our levels was released, 0 when the key is gone, is not a recursive
-- lock, or does not hold our token (nothing is touched then).
--@flags allow-oom
--@include lib/notify.lua
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[4] == '1' or redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('DEL', KEYS[1])
  dlock_notify(ARGV[2], 'released')
end
return 1
