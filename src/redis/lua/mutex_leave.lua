-- A dlock::mutex waiter gives up (timeout, cancel, a failed wait): it leaves the mutex waiters
-- (docs/redis-lock.md, "Waking one waiter"). If the lock is free it may have been woken and not
-- taken it, so the wake-up goes on to the next live head.
-- KEYS as acquire.lua; ARGV[1] waiter id, ARGV[2] release channel. Returns 0 (it never holds
-- the lock: a grant takes it off the waiters).
--@include lib/queue.lua
if redis.call('TYPE', KEYS[3]).ok == 'zset' then redis.call('ZREM', KEYS[3], ARGV[1]) end
if redis.call('TYPE', KEYS[4]).ok == 'zset' then redis.call('ZREM', KEYS[4], ARGV[1]) end
if redis.call('EXISTS', KEYS[1]) == 0 then dlock_wake_mutex_head(KEYS[3], KEYS[4], ARGV[2]) end
return 0
