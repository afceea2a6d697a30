-- The fence counter of a lock name (docs/redis-lock.md, "Fencing tokens and key expiry"):
-- composed into every script that grants or raises a fencing token at build time
-- (cmake/embed_lua.cmake), so the rule lives here only.
-- The counter is a string key that expires once the name is unused: every grant sets it to its
-- token with an expiry of max(idle period, the grant's lease), so it outlives the grant it was
-- issued for. A token is max(counter + 1, the server's TIME in microseconds) on one server, and
-- counter + 1 on Redlock (the clock only when there is no counter): see dlock_next_fence. Tokens
-- therefore rise strictly per name across the counter's expiry as long as the server's clock does
-- not step back by more than the idle period (a counter rises by one per grant, slower than the
-- clock; a Redlock write-back also carries other servers' clocks: their skew counts too).
-- Microseconds stay below 2^53 (exact in Lua's doubles) until the year 2255.

-- The server's time in microseconds.
local function dlock_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A token as decimal text: Lua's own number-to-string conversion (%.14g) would write a token of
-- sixteen digits with an exponent.
local function dlock_fence_text(fence)
  return string.format('%d', fence)
end

-- The error reply for counter `fence_key` when a command on it failed with `reply`.
local function dlock_fence_error(fence_key, reply)
  return redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ': ' .. reply.err)
end

-- `current`, the text counter `fence_key` held, as a whole number, or nil and an error reply.
local function dlock_fence_value(fence_key, current)
  local value = tonumber(current)
  if not value or value ~= math.floor(value) then
    return nil, redis.error_reply('WRONGTYPE fence counter ' .. fence_key .. ' holds "' ..
                                  current .. '", not a number')
  end
  return value
end

-- The value of counter `fence_key` (0 when absent), or nil and an error reply when it is not a
-- whole number.
local function dlock_read_fence(fence_key)
  local current = redis.pcall('GET', fence_key)
  if type(current) == 'table' and current.err then
    return nil, dlock_fence_error(fence_key, current)
  end
  if not current then return 0 end
  return dlock_fence_value(fence_key, current)
end

-- How long counter writes keep the counter: max(`idle_ms`, `lease_ms`) (ARGV text or numbers),
-- returned as given (text goes to the server as it is, not through Lua's number formatting);
-- nil (no expiry, the behaviour before the counter had one) when `idle_ms` is missing.
local function dlock_fence_keep(idle_ms, lease_ms)
  local idle = tonumber(idle_ms)
  if not idle then return nil end
  local lease = tonumber(lease_ms)
  if lease and lease > idle then return lease_ms end
  return idle_ms
end

-- SET of counter `fence_key` to `text` for `keep` ms (nil: no expiry), with GET when `get` is
-- set (the replaced value is the reply); redis.pcall's reply.
local function dlock_set_fence(fence_key, text, keep, get)
  if keep then
    if get then return redis.pcall('SET', fence_key, text, 'PX', keep, 'GET') end
    return redis.pcall('SET', fence_key, text, 'PX', keep)
  end
  if get then return redis.pcall('SET', fence_key, text, 'GET') end
  return redis.pcall('SET', fence_key, text)
end

-- Stores `value` in counter `fence_key` for `keep` ms (nil: no expiry). Returns an error reply
-- when the server refuses the write (e.g. a read-only replica), else nil.
local function dlock_store_fence(fence_key, value, keep)
  local done = dlock_set_fence(fence_key, dlock_fence_text(value), keep)
  if type(done) == 'table' and done.err then return dlock_fence_error(fence_key, done) end
  return nil
end

-- The next fencing token of counter `fence_key`, stored for max(`idle_ms`, `lease_ms`):
-- max(counter + 1, the server's clock in us), or with `clock_floor` == '0' counter + 1 (the
-- clock only when the counter is missing, 0 or less).
-- The clock floor is what keeps tokens rising when a counter is lost with the grants it counted:
-- a Sentinel failover to a replica that missed the last grants (docs/sentinel.md), a restart
-- without persistence. Redlock passes '0': each master's clock differs, so clock floors would
-- make the masters' next tokens disagree and nearly every grant pay a write-back round; its
-- quorum carries the counter instead (a majority that granted a token intersects every later
-- majority, and a master restarted empty seeds from its clock: docs/redlock.md).
-- With the clock floor the common case is one write and no read: SET ... GET stores the clock
-- and returns the counter it replaced, which is below the clock unless the clock stepped back
-- (or two grants fell in one microsecond); then counter + 1 is stored over it. A counter that is
-- not a number is put back (kept for max(`idle_ms`, `lease_ms`)) and refused; a key of another
-- type, or a server that refuses writes, makes SET ... GET fail without writing.
-- `now_us`: the server's clock in us if the script read it already (one TIME serves a script;
-- nil: read here). Returns it (a number), or nil and an error reply when the counter is unusable
-- (no grant changes then).
local function dlock_next_fence(fence_key, idle_ms, lease_ms, clock_floor, now_us)
  local keep = dlock_fence_keep(idle_ms, lease_ms)
  if clock_floor == '0' then
    local value, bad = dlock_read_fence(fence_key)
    if not value then return nil, bad end
    local fence = value + 1
    if value <= 0 then fence = math.max(fence, now_us or dlock_now_us()) end
    bad = dlock_store_fence(fence_key, fence, keep)
    if bad then return nil, bad end
    return fence
  end
  local fence = now_us or dlock_now_us()
  local replaced = dlock_set_fence(fence_key, dlock_fence_text(fence), keep, true)
  if type(replaced) == 'table' and replaced.err then
    return nil, dlock_fence_error(fence_key, replaced)
  end
  if not replaced then return fence end
  local value, bad = dlock_fence_value(fence_key, replaced)
  if not value then
    dlock_set_fence(fence_key, replaced, keep)  -- put back what was there
    return nil, bad
  end
  if value < fence then return fence end
  fence = value + 1
  local bad = dlock_store_fence(fence_key, fence, keep)
  if bad then return nil, bad end
  return fence
end

-- Redlock's write-back: raises counter `fence_key` to `fence` when it is lower, and keeps it at
-- least max(`idle_ms`, `lease_ms`) more. Returns nil, or an error reply when the counter is
-- unusable.
local function dlock_raise_fence(fence_key, fence, idle_ms, lease_ms)
  local value, bad = dlock_read_fence(fence_key)
  if not value then return bad end
  local keep = dlock_fence_keep(idle_ms, lease_ms)
  if value < fence then return dlock_store_fence(fence_key, fence, keep) end
  if keep and redis.call('PTTL', fence_key) < tonumber(keep) then
    redis.call('PEXPIRE', fence_key, keep)
  end
  return nil
end
