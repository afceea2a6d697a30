-- The number of permits of a counting_semaphore (docs/lock-family.md, "counting_semaphore"):
-- composed into the semaphore's scripts at build time (cmake/embed_lua.cmake), so the rule lives
-- here only.

-- Keeps the limit key `limit` until `idle_ms` after the last live grant of holders ZSET
-- `holders` ends (from `now_ms` when none is live): the number outlives its holders by the idle
-- period, then goes with the name's other keys. `idle_ms` missing or not a number: no expiry.
local function dlock_keep_limit(holders, limit, now_ms, idle_ms)
  local idle = tonumber(idle_ms)
  if not idle or redis.call('EXISTS', limit) == 0 then return end
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  local until_ms = now_ms
  if last[2] and tonumber(last[2]) > until_ms then until_ms = tonumber(last[2]) end
  redis.call('PEXPIREAT', limit, until_ms + idle)
end
