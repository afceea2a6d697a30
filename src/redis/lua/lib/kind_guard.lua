-- One name, one lock kind (docs/lock-family.md, "One name, one lock kind"): composed into every
-- acquire script at build time (cmake/embed_lua.cmake), so the rule lives here only.
-- The keys it reads are named after the lock key, so they share its hash slot.
-- Owner and waiter tokens carry their kind where the key's type cannot tell it: fair_mutex tokens
-- start with "fair:", shared_mutex writer tokens with "write:", and a plain string owner is a
-- dlock::mutex. A recursive_mutex is a hash at the lock key, a counting_semaphore a zset there,
-- and shared_mutex readers are the live members of <lock key>:readers.
local function dlock_token_kind(token)
  if string.sub(token, 1, 5) == 'fair:' then return 'dlock::fair_mutex' end
  if string.sub(token, 1, 6) == 'write:' then return 'dlock::shared_mutex' end
  return 'dlock::mutex'
end

-- What dlock_name_kind read of `base` itself: its type (`type`) and, for a string, its value
-- (`value`); both nil when the name was free. The calling script may use them instead of reading
-- the key again (nothing writes between the guard and the script's own checks). As a Redis
-- Functions library, this table outlives the call (cmake/embed_lua.cmake): dlock_name_kind
-- clears it first, so no call ever reads what an earlier one left.
local dlock_guard_read = {}

-- The kind that holds the name of lock key `base` (or has a live waiter queued on it) and how,
-- or nil when none does. A key of a type no lock uses is left to the script's own type check.
-- A third value, true, says more: the name is free (neither `base` nor its :readers, :queue,
-- :alive and :mutex_waiters exist), so the caller may skip its own checks of those keys (a
-- dlock::mutex hands a free key to a live waiter: acquire.lua).
local function dlock_name_kind(base)
  dlock_guard_read.type, dlock_guard_read.value = nil, nil
  -- A free name (the common case) in one call: none of the keys below exists, so every check
  -- below would find nothing (:alive is read only with :queue; it is asked here for the callers'
  -- sake). Each call counts: a Redlock acquire runs this on every server, and servers sharing
  -- cores answer one after another.
  if redis.call('EXISTS', base, base .. ':readers', base .. ':queue', base .. ':alive',
                base .. ':mutex_waiters') == 0 then
    return nil, nil, true
  end
  -- A held name is usually a string owner: GET reads its type and value in one call (it fails
  -- on a key of another type, which TYPE then names; false: no key).
  local value = redis.pcall('GET', base)
  if type(value) == 'string' then
    dlock_guard_read.type, dlock_guard_read.value = 'string', value
    return dlock_token_kind(value), 'holds'
  end
  local t = 'none'
  if value then t = redis.call('TYPE', base).ok end
  dlock_guard_read.type = t
  if t == 'hash' then return 'dlock::recursive_mutex', 'holds' end
  if t == 'zset' then return 'dlock::counting_semaphore', 'holds' end
  if t ~= 'none' then return nil end
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local readers = base .. ':readers'
  if redis.call('TYPE', readers).ok == 'zset' and redis.call('ZCOUNT', readers, now, '+inf') > 0 then
    return 'dlock::shared_mutex', 'has readers on'
  end
  local queue = base .. ':queue'
  if redis.call('TYPE', queue).ok ~= 'zset' then return nil end
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if not head then return nil end
  -- Only a live waiter counts: a dead one's entry is its own kind's to purge.
  local alive = base .. ':alive'
  local alive_type = redis.call('TYPE', alive).ok
  local deadline = nil
  if alive_type == 'hash' then
    deadline = redis.call('HGET', alive, head)
  elseif alive_type == 'zset' then
    deadline = redis.call('ZSCORE', alive, head)
  end
  if deadline and tonumber(deadline) and tonumber(deadline) >= now and
     dlock_token_kind(head) ~= 'dlock::mutex' then
    return dlock_token_kind(head), 'has a waiter queued on'
  end
  return nil
end

-- An error reply (WRONGTYPE, so the client reports errc::unexpected_reply) when another kind than
-- `mine` holds or waits on the name of lock key `base`; nil when `mine` may go on, and then true
-- as a second value when the name is free (dlock_name_kind). Call it before any write.
local function dlock_kind_guard(base, mine)
  local other, how, free = dlock_name_kind(base)
  if other and other ~= mine then
    return redis.error_reply('WRONGTYPE a ' .. other .. ' ' .. how .. ' the lock ' .. base ..
                             '; a ' .. mine .. ' cannot use that name (one name, one lock kind)')
  end
  return nil, free
end
