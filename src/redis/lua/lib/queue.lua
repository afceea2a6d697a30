-- The waiter queue of the queued lock kinds (fair_mutex, the write side of shared_mutex;
-- docs/lock-family.md) and of dlock::mutex's wake-one registration (docs/redis-lock.md):
-- composed into their scripts at build time (cmake/embed_lua.cmake), so the rules live here only. The keys come as parameters: their KEYS indices differ between the kinds.
-- Scripts that include this file include lib/notify.lua (its messages go out there) before it.
-- `queue` is the ZSET waiter token -> ticket (its arrival number), `alive` the ZSET waiter token ->
-- liveness deadline (server ms), `arrivals` the arrival counter.

-- The server's time in ms: the one clock every deadline in these keys is measured with.
local function dlock_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Dead waiters (liveness deadline before `now`) lose their place: O(log n + dead), not O(n).
-- Returns how many were purged. The liveness hash of earlier versions is dropped here, the first
-- time a purge meets it (its waiters join again): the hot paths pay no TYPE for it. A key of any
-- other type fails the script as before.
local function dlock_purge_dead(queue, alive, now)
  local dead = redis.pcall('ZRANGEBYSCORE', alive, '-inf', '(' .. now)
  if dead.err then
    if redis.call('TYPE', alive).ok ~= 'hash' then
      redis.call('ZRANGEBYSCORE', alive, '-inf', '(' .. now)  -- fails with the server's error
    end
    redis.call('DEL', alive)
    return 0
  end
  for _, w in ipairs(dead) do
    redis.call('ZREM', queue, w)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', alive, '-inf', '(' .. now)
  end
  return #dead
end

-- Joins `token` to the queue once and refreshes its liveness deadline to now + liveness ms.
-- The ticket is the arrival number, raised above `floor` (every ticket this waiter already had,
-- ARGV[8]; 0 or not a number: none), so a new entry never repeats one (the counter itself may
-- have expired meanwhile). A waiter that was told no ticket yet is joining: it draws one and is
-- added only if absent (ZADD NX; a repeated first attempt keeps its place and costs one more
-- command); one that was told a ticket is looked up first. The queue's keys outlive every live
-- entry (each join or refresh sets their TTL to 2 x liveness), and go once nobody refreshes.
-- A liveness hash of earlier versions is dropped (dlock_purge_dead) before the deadline is
-- written. Returns the waiter's ticket (a number).
local function dlock_join_queue(queue, alive, arrivals, token, floor, now, liveness)
  local lowest = tonumber(floor) or 0
  local ticket = nil
  if lowest > 0 then ticket = redis.call('ZSCORE', queue, token) end
  if not ticket then
    ticket = redis.call('INCR', arrivals)
    if ticket <= lowest then
      ticket = lowest + 1
      redis.call('SET', arrivals, ticket)
    end
    if redis.call('ZADD', queue, 'NX', ticket, token) == 0 then
      ticket = redis.call('ZSCORE', queue, token)
    end
  end
  -- Numbers go to the server as text made once with %d: Lua's own conversion (%.17g) on each
  -- redis.call costs about as much as a short command's own time.
  local deadline = string.format('%d', now + liveness)
  if type(redis.pcall('ZADD', alive, deadline, token)) == 'table' then
    dlock_purge_dead(queue, alive, now)  -- drops a hash; another type fails with the server's error
    redis.call('ZADD', alive, deadline, token)
  end
  -- Set, not checked first: a TTL read back is always below the 2 x liveness set last time (it
  -- counts down), so a PTTL before each PEXPIRE cost a command and saved none.
  local keep = string.format('%d', 2 * liveness)
  redis.call('PEXPIRE', queue, keep)
  redis.call('PEXPIRE', alive, keep)
  redis.call('PEXPIRE', arrivals, keep)
  return tonumber(ticket)
end

-- Makes `token` the owner of lock key `owner` with a fresh fencing token (lib/fence.lua,
-- dlock_next_fence: the counter `fence_key` kept max(`idle_ms`, `lease_ms`)) and a lease of
-- `lease_ms`, and takes it off the queue. `clock_floor` as dlock_next_fence's ('0': Redlock's
-- counters, no clock floor; nil: one server's, with it), `now_us` as dlock_next_fence's. Returns
-- the fencing token, or nil and an error reply when the fence counter is unusable (nothing is
-- written then). Scripts that include this file include lib/fence.lua before it.
local function dlock_grant(owner, fence_key, queue, alive, token, lease_ms, idle_ms, clock_floor,
                           now_us)
  local fence, bad = dlock_next_fence(fence_key, idle_ms, lease_ms, clock_floor, now_us)
  if not fence then return nil, bad end
  redis.call('SET', owner, token, 'PX', lease_ms)
  redis.call('ZREM', queue, token)
  redis.call('ZREM', alive, token)
  return fence
end

-- The hand-off channel of waiter `token` (<kind>:<client>.<random>): <channel>:<the token up to
-- its last '.'>, one per client and lock name; a token without '.' has a channel of its own.
local function dlock_waiter_channel(channel, token)
  local client = string.match(token, '^(.*)%.') or token
  return channel .. ':' .. client
end

-- Tells waiter `token` that it was granted the lock with fencing token `fence` for its queue
-- entry `ticket`: "granted <fence> <ticket> <token>" on its client's hand-off channel
-- <channel>:<the token up to its last '.'> (a queued waiter's token is <kind>:<client>.<random>,
-- so one client waits on one channel per lock name, subscribed once; a token without '.' has a
-- channel of its own). The token in the message says whose grant it is: one notification, one
-- winner.
local function dlock_publish_grant(channel, token, fence, ticket)
  dlock_notify(dlock_waiter_channel(channel, token),
               'granted ' .. dlock_fence_text(fence) .. ' ' .. ticket .. ' ' .. token)
end

-- The value of string key `key`, or nil when it is absent (or not a string: nobody's).
local function dlock_get_string(key)
  if redis.call('TYPE', key).ok ~= 'string' then return nil end
  return redis.call('GET', key)
end

-- The live head of waiters `queue` (liveness `alive`) at `now` (server ms) and its ticket; nil
-- when none is left. Entries met before it leave the queue: one without a liveness deadline, and
-- `drop` (a token or nil); the first dead one (deadline before `now`) purges every dead waiter at
-- once (dlock_purge_dead). So a live head costs one ZRANGE and one ZSCORE, and no purge.
-- `lenient`: keys that are not the waiters' zsets give nil; else a liveness hash of earlier
-- versions is dropped (dlock_purge_dead) and another type fails with the server's error.
-- `first`: the queue's first entry as ZRANGE <queue> 0 0 WITHSCORES read it in this script (nil:
-- read here).
local function dlock_live_head(queue, alive, now, drop, lenient, first)
  while true do
    local head = first or redis.pcall('ZRANGE', queue, 0, 0, 'WITHSCORES')
    first = nil
    if head.err then
      if lenient then return nil end
      redis.call('ZRANGE', queue, 0, 0)  -- fails with the server's error
    end
    if not head[1] then return nil end
    local deadline = false
    if head[1] ~= drop then deadline = redis.pcall('ZSCORE', alive, head[1]) end
    if type(deadline) == 'table' then
      if lenient then return nil end
      dlock_purge_dead(queue, alive, now)
      deadline = false
    end
    if deadline and tonumber(deadline) >= now then return head[1], head[2] end
    if deadline then
      dlock_purge_dead(queue, alive, now)  -- the head too
    else
      redis.call('ZREM', queue, head[1])
      redis.call('ZREM', alive, head[1])
    end
  end
end

-- dlock::mutex waiters (docs/redis-lock.md, "Waking one waiter"; Redlock: docs/redlock.md,
-- "Waiting") join their own queue with dlock_join_queue (keys <lock key>:mutex_waiters,
-- :mutex_alive, :mutex_arrivals). A free lock key with a live waiter is handed to the live head
-- at once, as a fair_mutex release does: the key becomes the head's waiter id (its owner token
-- from its registration on) with a fresh fencing token (dlock_next_fence with `clock_floor`: '0'
-- for Redlock's counters, else the server's clock is a floor) and a lease of `lease_ms`, the head
-- leaves the queue, and it is told "granted <fence> <ticket> <its id>" on its client's hand-off
-- channel (dlock_publish_grant; the ticket is its entry's arrival number). That grant is the hold
-- on one server; on Redlock the head holds once such grants from a quorum of nodes, at one fencing
-- token, reached it, each for the entry its latest attempt there was told "held" with (the ticket
-- rule, one ticket per node). A head whose message was lost, or that waits for replicas, takes
-- the key up with its own attempt (acquire.lua answers "granted" where the key is its id); on
-- Redlock, where the nodes' queues disagree, that attempt is a split and is undone, which hands
-- each node on (models/redlock_grant.pml). Dead waiters are purged first, so the head is live. So
-- nobody barges past a live waiter, and a head never races its releaser. `lease_ms` is never
-- above the hand-off lease the waiter counts a grant's validity with
-- (dlock::redis::detail::handoff_lease). A live head that is `except` (the calling waiter itself;
-- nil: none) is not handed anything. `first` as dlock_live_head's. The key is written over
-- whatever it holds (a release hands its own key on without deleting it first). Returns an error
-- reply when the fence counter is unusable (nothing is written then), else nil and, as a second
-- value, true when a head was handed the key.
local function dlock_hand_mutex_head(owner, fence_key, queue, alive, channel, lease_ms, idle_ms,
                                    clock_floor, except, first)
  local now_us = dlock_now_us()  -- one TIME for the purge and the fence
  local head, ticket = dlock_live_head(queue, alive, math.floor(now_us / 1000), nil, true, first)
  if not head or head == except then return nil, false end
  local fence, bad = dlock_grant(owner, fence_key, queue, alive, head, lease_ms, idle_ms,
                                 clock_floor, now_us)
  if not fence then return bad end
  dlock_publish_grant(channel, head, fence, ticket)
  return nil, true
end

-- Hands the lock to the waiter `head` (its queue entry's ticket `ticket`) as dlock_grant does and
-- tells it (dlock_publish_grant). `now_us`: the script's TIME in µs (nil: read here). Returns an
-- error reply when the fence counter is unusable, else nil.
local function dlock_hand_off(owner, fence_key, queue, alive, head, ticket, lease_ms, channel,
                              idle_ms, now_us)
  local fence, bad = dlock_grant(owner, fence_key, queue, alive, head, lease_ms, idle_ms, nil,
                                 now_us)
  if bad then return bad end
  dlock_publish_grant(channel, head, fence, ticket)
  return nil
end
