-- Read-only: what the server knows about one lock name, whichever kind uses it (backend::inspect,
-- docs/lock-family.md). It reads the key layout of every acquire script (see their headers and
-- lib/kind_guard.lua) and writes nothing: expired shares, grants and dead waiters are skipped,
-- not purged.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] waiter queue, KEYS[4] waiter liveness,
-- KEYS[5] readers, KEYS[6] semaphore counts, KEYS[7] semaphore limit, KEYS[8] the liveness of
-- dlock::mutex's registered waiters (absent: not read); ARGV[1] release channel.
-- Returns {type, held, holders, readers, writer, depth, permits in use, limit (-1: none set),
-- live waiters, subscribers, fence counter ('': none), lease left ms (-1: not held, -2: held
-- without expiry), detail}. type is mutex, recursive_mutex, fair_mutex, shared_mutex,
-- counting_semaphore, none or foreign (detail says what was found).
--@flags no-writes
--@include lib/kind_guard.lua
--@include lib/notify.lua
--@include lib/queue.lua
local now = dlock_now_ms()
local kind, detail = 'none', ''
local held, holders, readers, writer, depth, permits, limit, lease = 0, 0, 0, 0, 0, 0, -1, -1
local waiters = 0

local function foreign(what)
  if kind ~= 'foreign' then
    kind, detail = 'foreign', what
  end
end

-- PTTL as this script reports it: -2 for a key without expiry.
local function pttl(key)
  local ms = redis.call('PTTL', key)
  if ms == -1 then return -2 end
  return ms
end

-- Queued waiters whose liveness deadline has not passed (a dead one's entry does not count).
local function live_waiters()
  local t = redis.call('TYPE', KEYS[4]).ok
  if t == 'zset' then return redis.call('ZCOUNT', KEYS[4], now, '+inf') end
  if t == 'hash' then  -- the liveness layout of earlier versions
    local n = 0
    for _, d in ipairs(redis.call('HVALS', KEYS[4])) do
      if (tonumber(d) or 0) >= now then n = n + 1 end
    end
    return n
  end
  return 0
end

-- The kind of the first live waiter in the queue, or nil.
local function first_live_waiter_kind()
  if redis.call('TYPE', KEYS[3]).ok ~= 'zset' then return nil end
  local alive_type = redis.call('TYPE', KEYS[4]).ok
  for _, token in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local deadline = nil
    if alive_type == 'zset' then
      deadline = redis.call('ZSCORE', KEYS[4], token)
    elseif alive_type == 'hash' then
      deadline = redis.call('HGET', KEYS[4], token)
    end
    if deadline and (tonumber(deadline) or 0) >= now then return dlock_token_kind(token) end
  end
  return nil
end

local names = {['dlock::mutex'] = 'mutex', ['dlock::fair_mutex'] = 'fair_mutex',
               ['dlock::shared_mutex'] = 'shared_mutex'}

local t = redis.call('TYPE', KEYS[1]).ok
if t == 'string' then
  kind = names[dlock_token_kind(redis.call('GET', KEYS[1]))]
  held, holders, lease = 1, 1, pttl(KEYS[1])
  if kind == 'shared_mutex' then writer = 1 end
elseif t == 'hash' then
  if redis.call('HEXISTS', KEYS[1], 'fence') == 1 then
    kind, held, holders, lease = 'recursive_mutex', 1, 1, pttl(KEYS[1])
    local fields = redis.call('HGETALL', KEYS[1])
    for i = 1, #fields, 2 do
      if fields[i] ~= 'fence' then depth = depth + (tonumber(fields[i + 1]) or 0) end
    end
  else
    foreign('key ' .. KEYS[1] .. ' is a hash without a fence field, not a dlock::recursive_mutex')
  end
elseif t == 'zset' then
  kind = 'counting_semaphore'
  local counts_type = redis.call('TYPE', KEYS[6]).ok
  if counts_type ~= 'none' and counts_type ~= 'hash' then
    foreign('key ' .. KEYS[6] .. ' is a ' .. counts_type .. ', not a semaphore\'s permit counts')
  end
  -- A grant whose expiry is at or before now is purged by the next acquire: not live.
  local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    holders = holders + 1
    if counts_type == 'hash' then
      permits = permits + (tonumber(redis.call('HGET', KEYS[6], live[i])) or 0)
    end
    local left = tonumber(live[i + 1]) - now
    if lease < 0 or left < lease then lease = left end
  end
  if holders > 0 then held = 1 end
elseif t ~= 'none' then
  foreign('key ' .. KEYS[1] .. ' is a ' .. t .. ', not a dlock lock')
end

if t == 'none' then
  local readers_type = redis.call('TYPE', KEYS[5]).ok
  if readers_type == 'zset' then
    local live = redis.call('ZRANGEBYSCORE', KEYS[5], now, '+inf', 'WITHSCORES')
    for i = 1, #live, 2 do
      readers = readers + 1
      local left = tonumber(live[i + 1]) - now
      if lease < 0 or left < lease then lease = left end
    end
    if readers > 0 then kind, held, holders = 'shared_mutex', 1, readers end
  elseif readers_type ~= 'none' then
    foreign('key ' .. KEYS[5] .. ' is a ' .. readers_type .. ', not a shared_mutex\'s readers')
  end
  if kind == 'none' then
    local waiting = first_live_waiter_kind()
    if waiting then kind = names[waiting] end
  end
end
if kind == 'fair_mutex' or kind == 'shared_mutex' then waiters = live_waiters() end

-- dlock::mutex's registered waiters (docs/redis-lock.md, "Waking one waiter"); a free name with
-- live ones is a mutex's (a key handed to a waiter that left is handed on at the next attempt).
if KEYS[8] and (kind == 'mutex' or kind == 'none') and redis.call('TYPE', KEYS[8]).ok == 'zset' then
  waiters = redis.call('ZCOUNT', KEYS[8], now, '+inf')
  if kind == 'none' and waiters > 0 then kind = 'mutex' end
end

-- A semaphore's number of permits outlives its grants.
local limit_type = redis.call('TYPE', KEYS[7]).ok
if limit_type == 'string' and (kind == 'none' or kind == 'counting_semaphore') then
  limit = tonumber(redis.call('GET', KEYS[7])) or -1
  if limit < 0 then
    foreign('semaphore limit ' .. KEYS[7] .. ' is not a number')
  else
    kind = 'counting_semaphore'
  end
end

local fence = ''
local fence_type = redis.call('TYPE', KEYS[2]).ok
if fence_type == 'string' then
  fence = redis.call('GET', KEYS[2])
  if not string.match(fence, '^%d+$') then
    foreign('fence counter ' .. KEYS[2] .. ' holds "' .. fence .. '", not a number')
    fence = ''
  end
elseif fence_type ~= 'none' then
  foreign('fence counter ' .. KEYS[2] .. ' is a ' .. fence_type .. ', not a number')
end

local subscribers = redis.call('PUBSUB', 'NUMSUB', ARGV[1])[2]

return {kind, held, holders, readers, writer, depth, permits, limit, waiters, subscribers, fence,
        lease, detail}
