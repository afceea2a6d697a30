-- A dlock::mutex waiter gives up (timeout, cancel, a failed wait): it leaves the mutex waiters
-- (docs/redis-lock.md, "Waking one waiter"). A release (or an attempt that found the key free)
-- may have handed it the key meanwhile: the key goes on to the next live head (lib/queue.lua,
-- dlock_hand_mutex_head), as does a key found free with waiters, unless another kind holds the
-- name: registered mutex waiters do not keep other kinds out (lib/kind_guard.lua), so shared_mutex
-- readers may hold it once the key ran out, and then nobody is handed the key.
-- KEYS as acquire.lua; ARGV[1] waiter id, ARGV[2] release channel, ARGV[3] hand-off lease ms,
-- ARGV[5] the fence counter's idle period ms, ARGV[7] '0' for Redlock's fence counters (no clock
-- floor; lib/fence.lua). Returns 0 (it never holds the lock: a grant takes it off the waiters).
--@flags allow-oom
--@include lib/fence.lua
--@include lib/notify.lua
--@include lib/queue.lua
--@include lib/kind_guard.lua
if redis.call('TYPE', KEYS[3]).ok == 'zset' then redis.call('ZREM', KEYS[3], ARGV[1]) end
if redis.call('TYPE', KEYS[4]).ok == 'zset' then redis.call('ZREM', KEYS[4], ARGV[1]) end
if dlock_get_string(KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('EXISTS', KEYS[1]) == 0 and not dlock_name_kind(KEYS[1]) then
  local bad = dlock_hand_mutex_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[5],
                                    ARGV[7])
  if bad then return bad end
end
return 0
