-- The administrative call behind backend::set_permits (docs/lock-family.md, "counting_semaphore"):
-- set the number of permits, then wake the waiters so they re-check against the new number.
-- Grants already held stay held, even above a lowered number.
-- KEYS as semaphore_acquire (holders ZSET, fence, counts HASH, limit); ARGV[1] permits (>= 1),
-- ARGV[2] release channel, ARGV[3] the idle period in ms (lib/semaphore.lua: the number is kept
-- that long after the last grant ends, or from now when none is live).
-- Returns 1.
--@include lib/semaphore.lua
--@include lib/notify.lua
for i, want in ipairs({'zset', 'string', 'hash', 'string'}) do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE semaphore key ' .. KEYS[i] .. ' holds a ' .. t ..
                             ', not a ' .. want .. ' (is the name used by another lock kind?)')
  end
end
redis.call('SET', KEYS[4], ARGV[1])
local time = redis.call('TIME')
dlock_keep_limit(KEYS[1], KEYS[4], tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000),
                 ARGV[3])
dlock_notify(ARGV[2], 'released')
return 1
