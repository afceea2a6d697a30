-- Take the lock in one round trip (docs/redis-lock.md).
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3..5] the mutex waiters' queue, liveness and
-- arrival counter (lib/queue.lua, dlock_hand_mutex_head; KEYS[3..5] may be absent); ARGV[1] owner
-- token, ARGV[2] lease in ms, ARGV[5] waiter liveness ms (also the lease of a key handed to a
-- waiter here), ARGV[6] release channel, ARGV[8] the highest ticket the waiter was told on any
-- node, ARGV[9] waiter id (<kind>:<client>.<random>; empty or absent: the caller does not
-- register, e.g. a first attempt or try_lock()), ARGV[10] the fence counter's idle period in ms,
-- ARGV[11] '0' when the token must not take the server's clock as a floor (Redlock; lib/fence.lua).
-- Returns {1, fencing token} when granted, {0, ms, ticket} when not (ms: the holder's remaining
-- lease, -1: no expiry; ticket: a registered waiter's entry's arrival number, named by the grant
-- a release hands it).
-- When not granted, a waiter id joins the mutex waiters (or refreshes its liveness: the call is
-- idempotent); a grant takes it off. A free key with a live waiter first goes to that waiter, as
-- a release would hand it (lib/queue.lua, dlock_hand_mutex_head): nobody barges past a live
-- registered waiter. A key handed to the caller's waiter id is taken up with the lease asked for.
-- A name held by (or with waiters of) another lock kind is refused: lib/kind_guard.lua.
-- The uncontended path comes first and returns before the waiter functions are even defined
-- (docs/redis-lock.md, "Acquire in one round trip": run by EVALSHA, each function a script defines
-- is made anew on every call, so the common case defines only what it uses).
--@include lib/kind_guard.lua
--@include lib/fence.lua
local refused, free = dlock_kind_guard(KEYS[1], 'dlock::mutex')
if refused then return refused end
local waiter = ARGV[9]
if waiter == '' or not KEYS[5] then waiter = nil end

-- The grant: the token before SET (if the counter is unusable nothing has been taken yet).
-- Returns the fencing token, or nil and the error reply.
local function take()
  local fence, bad = dlock_next_fence(KEYS[2], ARGV[10], ARGV[2], ARGV[11])
  if not fence then return nil, bad end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return fence
end

-- A free name (no holder, no waiters: dlock_kind_guard checked both) and a caller that is not a
-- registered waiter (nothing of it to take off the waiters): granted.
if free and not waiter then
  local fence, bad = take()
  if not fence then return bad end
  return {1, fence}
end

--@include lib/notify.lua
--@include lib/queue.lua

-- Not granted: register (or refresh) the waiter. The reply also carries the entry's ticket,
-- above ARGV[8] (every ticket the waiter had on any node), which a hand-off grant names
-- (dlock_hand_mutex_head).
local function wait_with(ms)
  if waiter then
    local ticket = dlock_join_queue(KEYS[3], KEYS[4], KEYS[5], waiter, ARGV[8], dlock_now_ms(),
                                    tonumber(ARGV[5]))
    return {0, ms, ticket}
  end
  return {0, ms}
end

-- The guard read the lock key already (KEYS[1] is its <lock key>; nothing read: the name was free).
local held = dlock_guard_read.type or 'none'
if held ~= 'none' then
  if held ~= 'string' then
    return redis.error_reply('WRONGTYPE lock key ' .. KEYS[1] .. ' holds a ' .. held .. ', not a lock')
  end
  if waiter and dlock_guard_read.value == waiter and ARGV[1] == waiter then
    -- A release (or an earlier attempt) handed the free key to us, the head of the waiters
    -- (lib/queue.lua, dlock_hand_mutex_head), and its message did not reach us (or the WAIT
    -- safeguard asks for a grant by attempt); our attempt, whose token is our waiter id, takes it
    -- up with the lease asked for.
    -- Only grants move the counter, and the key has held our id since that hand-off's grant, so
    -- the counter holds its token; it is kept as long as the lease, as a grant keeps it.
    local fence, bad = dlock_read_fence(KEYS[2])
    if not fence then return bad end
    if fence <= 0 then
      fence, bad = dlock_next_fence(KEYS[2], ARGV[10], ARGV[2], ARGV[11])
      if not fence then return bad end
    else
      local keep = tonumber(dlock_fence_keep(ARGV[10], ARGV[2]))
      local ttl = redis.call('PTTL', KEYS[2])
      if keep and ttl >= 0 and ttl < keep then redis.call('PEXPIRE', KEYS[2], keep) end
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, fence}
  end
  return wait_with(redis.call('PTTL', KEYS[1]))
end
-- A free key with a live waiter first is handed to that head (as a release would; lib/queue.lua,
-- dlock_hand_mutex_head), and we wait behind it.
if KEYS[4] then
  local bad, handed = dlock_hand_mutex_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[6], ARGV[5],
                                            ARGV[10], ARGV[11], waiter)
  if bad then return bad end
  if handed then return wait_with(redis.call('PTTL', KEYS[1])) end
end
local fence, bad = take()
if not fence then return bad end
if waiter then
  redis.call('ZREM', KEYS[3], waiter)
  redis.call('ZREM', KEYS[4], waiter)
end
return {1, fence}
