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
-- Returns how many were purged.
local function dlock_purge_dead(queue, alive, now)
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', '(' .. now)
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
-- have expired meanwhile). The queue's keys outlive every live entry (each join or refresh sets
-- their TTL to 2 x liveness), and go once nobody refreshes. Returns the waiter's ticket (a number).
local function dlock_join_queue(queue, alive, arrivals, token, floor, now, liveness)
  local ticket = redis.call('ZSCORE', queue, token)
  if not ticket then
    ticket = redis.call('INCR', arrivals)
    local lowest = tonumber(floor) or 0
    if ticket <= lowest then
      ticket = lowest + 1
      redis.call('SET', arrivals, ticket)
    end
    redis.call('ZADD', queue, ticket, token)
  end
  redis.call('ZADD', alive, now + liveness, token)
  -- Set, not checked first: a TTL read back is always below the 2 x liveness set last time (it
  -- counts down), so a PTTL before each PEXPIRE cost a command and saved none.
  for _, k in ipairs({queue, alive, arrivals}) do
    redis.call('PEXPIRE', k, 2 * liveness)
  end
  return tonumber(ticket)
end

-- Makes `token` the owner of lock key `owner` with a fresh fencing token (lib/fence.lua,
-- dlock_next_fence: the counter `fence_key` kept max(`idle_ms`, `lease_ms`)) and a lease of
-- `lease_ms`, and takes it off the queue. `clock_floor` as dlock_next_fence's ('0': Redlock's
-- counters, no clock floor; nil: one server's, with it). Returns the fencing token, or nil and an
-- error reply when the fence counter is unusable (nothing is written then). Scripts that include
-- this file include lib/fence.lua before it.
local function dlock_grant(owner, fence_key, queue, alive, token, lease_ms, idle_ms, clock_floor)
  local fence, bad = dlock_next_fence(fence_key, idle_ms, lease_ms, clock_floor)
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

-- dlock::mutex waiters (docs/redis-lock.md, "Waking one waiter"): they join their own queue with
-- dlock_join_queue (keys <lock key>:mutex_waiters, :mutex_alive, :mutex_arrivals) and, on one
-- server, are never granted the lock by a release: the live head is only told "wake <its id>" on its client's
-- hand-off channel, stays queued, and takes the lock with its own acquire (a barger may beat it;
-- it keeps its place then). Dead waiters are purged first, so the one woken is live.
--
-- The turn (docs/redis-lock.md, "Waking one waiter", the bound): `woken` (<lock key>:mutex_woken)
-- names the head the previous wake-up went to. If the head is woken again while it is still
-- queued, it lost a race to a barger (or has not run yet): this time `turn`
-- (<lock key>:mutex_turn) reserves the free lock for it for dlock_mutex_turn_ms, so acquire.lua
-- refuses everyone else meanwhile and a woken head waits out at most one barged hold. The live
-- waiter next in line is woken too: refused, it re-checks when the turn runs out (acquire.lua),
-- so a head that never comes (paused, dead) stalls the others by the window, not by their
-- periodic re-check; the others re-check as usual. One server only: Redlock's servers hand their
-- key to their head instead (dlock_hand_mutex_head).

-- How long a turn reserves the lock for its head: its subscriber's wake-up, its thread's and one
-- round trip take about a millisecond, so 100 ms leaves a wide margin on a loaded machine, and
-- a paused or dead head stalls the others by at most this much per release until its liveness
-- (2 s) runs out and it is purged. dlock::redis::detail::mutex_turn (src/redis/protocol.hpp) is
-- the same value; tests/unit/protocol_test.cpp checks that they agree.
local dlock_mutex_turn_ms = 100

-- The value of string key `key`, or nil when it is absent (or not a string: nobody's).
local function dlock_get_string(key)
  if redis.call('TYPE', key).ok ~= 'string' then return nil end
  return redis.call('GET', key)
end

-- The live head of the mutex waiters `queue` (liveness `alive`), once the dead ones are purged and
-- any entry without a liveness deadline is dropped, with its deadline and the server's time (ms);
-- nil when none is left (or the keys are not the waiters' zsets).
local function dlock_live_mutex_head(queue, alive)
  if redis.call('TYPE', queue).ok ~= 'zset' or redis.call('TYPE', alive).ok ~= 'zset' then
    return nil
  end
  local now = dlock_now_ms()
  dlock_purge_dead(queue, alive, now)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then return nil end
    local deadline = tonumber(redis.call('ZSCORE', alive, head))
    if deadline then return head, deadline, now end
    redis.call('ZREM', queue, head)  -- no liveness deadline: not a live waiter
  end
end

local function dlock_wake_mutex_head(queue, alive, channel, turn, woken)
  local head, deadline, now = dlock_live_mutex_head(queue, alive)
  if not head then return end
  if dlock_get_string(woken) == head then
    redis.call('SET', turn, head, 'PX', dlock_mutex_turn_ms)
    local next = redis.call('ZRANGE', queue, 1, 1)[1]
    if next and redis.call('ZSCORE', alive, next) then
      dlock_notify(dlock_waiter_channel(channel, next), 'wake ' .. next)
    end
  else
    -- Kept as long as the head's liveness (acquire.lua extends it with each refresh).
    redis.call('SET', woken, head, 'PX', math.max(1, deadline - now))
  end
  dlock_notify(dlock_waiter_channel(channel, head), 'wake ' .. head)
end

-- Redlock's dlock::mutex waiters (docs/redlock.md, "Waiting"): a node whose lock key is free hands
-- it to its own live head at once instead of waking it, as a fair_mutex release does on one server:
-- the key becomes the head's waiter id (its owner token from its registration on) with a fresh
-- fencing token (no clock floor: Redlock's counters, lib/fence.lua) and a lease of `lease_ms`, the
-- head leaves the queue, and it is told "granted <fence> <ticket> <its id>" on its client's
-- hand-off channel (dlock_publish_grant; the ticket is its entry's arrival number there). The head
-- holds once such grants from a quorum of nodes, at one fencing token, reached it, each for the
-- entry its latest attempt there was told "held" with (the ticket rule, one ticket per node); else
-- its own attempt finds the nodes where the key is its id (acquire.lua answers "granted" there).
-- Where the nodes' queues disagree, that attempt is a split and is undone, which hands each node
-- on (models/redlock_grant.pml). So nobody barges past a live waiter, and a head never races its
-- releaser. `lease_ms` is never above the hand-off lease the waiter counts a grant's validity with
-- (dlock::redis::detail::handoff_lease). A live head that is `except` (the calling waiter itself;
-- nil: none) is not handed anything. Returns an error reply when the fence counter is unusable,
-- else nil.
local function dlock_hand_mutex_head(owner, fence_key, queue, alive, channel, lease_ms, idle_ms,
                                    except)
  local head = dlock_live_mutex_head(queue, alive)
  if not head or head == except then return nil end
  local ticket = redis.call('ZSCORE', queue, head)
  local fence, bad = dlock_grant(owner, fence_key, queue, alive, head, lease_ms, idle_ms, '0')
  if not fence then return bad end
  dlock_publish_grant(channel, head, fence, ticket)
  return nil
end

-- Hands the lock to the waiter `head` (its queue entry's ticket `ticket`) as dlock_grant does and
-- tells it (dlock_publish_grant). Returns an error reply when the fence counter is unusable, else
-- nil.
local function dlock_hand_off(owner, fence_key, queue, alive, head, ticket, lease_ms, channel,
                              idle_ms)
  local fence, bad = dlock_grant(owner, fence_key, queue, alive, head, lease_ms, idle_ms)
  if bad then return bad end
  dlock_publish_grant(channel, head, fence, ticket)
  return nil
end
