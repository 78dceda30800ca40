-- queue-conf-1.lua: replace a group of a queue's settings in one step (queue-level rate limits,
-- backpressure bounds).
--
-- KEYS
--   KEYS[1] P..'q:'..queue..':conf'   hash   per-queue settings (rl_* read by fetch-1.lua before it
--                                           takes from Q; bp_* read by includes/create.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] queue         string the queue
--   ARGV[3] n             int(0..100) how many field names follow: the group being replaced
--   ARGV[4..3+n] fields   string the group's fields, all removed first
--   ARGV[4+n..] pairs     field, value: the group's new values (none = the group is cleared)
-- RETURNS
--   {'ok'}
-- COST   O(fields), and O(1) per tenant re-opened (below); when the queue's pools move, per pool
--        a few commands and the lanes it holds back re-opened, and per lane re-synced a few reads and
--        writes (ratelimit.lua Pool.sync)
-- CAPS   the fields given (one settings group: a handful); the tenants parked at their concurrency that
--        re-join the fair share: at most UNPARK_MAX = 1000 (each other one re-joins when one of its
--        slots comes back: includes/tenant.lua); the tenants' pools whose floors owed are dropped at once
--        when the pools change: at most UNPARK_MAX (the others' at their next sync); the lanes that owe
--        their floors anew at once in the queue's pools that came, went or moved: at most RESYNC_MAX =
--        100 (HRANDFIELD of the heads and parked hashes of the queue, then of its sub-queues; the others
--        owe nothing until their next sync); the lanes each pool held back that re-open at once: at
--        most POOL_WAKE_MAX = 10 per pool (ratelimit.lua Pool.wake; the others' timers look again)
-- CLOCK  Redis TIME (only when the queue's pools moved)
-- INVARIANTS
--   the old values of the group are replaced by the new ones in one script, so no FETCH or enqueue
--   runs between the removal and the write and sees the queue without its settings
--   (P..'q:'..queue..':rl:active' and ':rl:win' are counters, not settings: they stay); a change may
--   move a tenant's concurrency (the tenancy setting), so the tenants parked at theirs re-join the
--   fair share and FETCH parks again those still at their cap; a pool that comes or goes (the
--   concurrency set or removed) or tenants' caps that move bump the queue's pool_gen, so the floors owed
--   in its pools are owed no more (ratelimit.lua "Burstable concurrency"), and the lanes waiting there
--   (up to RESYNC_MAX) owe their floors anew in the pools they draw from now, in the same script: a
--   changed setting takes effect at once, so no borrower takes a slot a waiting key's floor keeps; a
--   pool that grew, came or went re-opens the lanes it held back
--@include clock
--@include emit
--@include ratelimit
--@include tenant

local UNPARK_MAX = 1000
-- Lanes whose floors owed are re-computed at once when the queue's pools move.
local RESYNC_MAX = 100
local conf = KEYS[1]
local n = tonumber(ARG.n)
arg_layout('queue_conf', #ARGV >= ARG.REST - 1 + n and (#ARGV - ARG.REST + 1 - n) % 2 == 0,
  'n field names, then field, value pairs')
local fields, pairs_ = {}, {}
for i = ARG.REST, ARG.REST - 1 + n do fields[#fields + 1] = ARGV[i] end
for i = ARG.REST + n, #ARGV do pairs_[#pairs_ + 1] = ARGV[i] end
-- The fields that make the queue's pools (its concurrency, its tenants' caps), before and after.
local before = redis.call('HMGET', conf, 'rl_concurrency', 'tenancy')
if #fields > 0 then redis.call('HDEL', conf, unpack(fields)) end
if #pairs_ > 0 then redis.call('HSET', conf, unpack(pairs_)) end
local after = redis.call('HMGET', conf, 'rl_concurrency', 'tenancy')
-- A pool that came or went, or tenants' caps that moved: the floors owed in the queue's pools leave
-- with the pools they were owed in (ratelimit.lua "Burstable concurrency", pool_gen; issue 37 item 8).
if (before[1] == false) ~= (after[1] == false) or before[2] ~= after[2] then
  incr(conf, 'pool_gen', 1)
  -- Left at once where it is cheap: the queue's own pool and its first UNPARK_MAX tenants'; the others'
  -- leave at their pool's next sync (ratelimit.lua Pool.part), and count for nothing meanwhile.
  local pools = redis.call('SRANDMEMBER', key_queue_subs(ARG.P, ARG.queue), UNPARK_MAX)
  for i = 1, #pools do pools[i] = Tenant.sub_queue(ARG.queue, pools[i]) end
  table.insert(pools, 1, ARG.queue)
  for _, pool in ipairs(pools) do
    redis.call('DEL', key_queue_want(ARG.P, pool))
    redis.call('HDEL', key_queue_conf(ARG.P, pool), 'want', 'want_gen')
  end
  -- The lanes waiting in the queue and its sub-queues owe their floors at once in the pools they draw
  -- from now (a lane is a key of the heads or parked hash; Pool.sync decides whether it owes), and the
  -- lanes a pool held back look again: the pool may be larger, or gone.
  local now = now_ms()
  local budget = RESYNC_MAX
  for _, q in ipairs(pools) do
    Pool.wake(ARG.P, q, now)
    for _, h in ipairs({ key_queue_heads(ARG.P, q), key_queue_parked(ARG.P, q) }) do
      if budget <= 0 then break end
      for _, key in ipairs(redis.call('HRANDFIELD', h, budget)) do
        budget = budget - 1
        local pol = Policy.of(ARG.P, key, nil)
        if pol and pol.floor then
          local floor, pool = Pool.floor_of(ARG.P, q, Policy.effective(ARG.P, key, pol))
          Pool.sync(ARG.P, q, key, floor or 0, now, nil, nil, pool)
        end
      end
    end
  end
elseif before[1] ~= after[1] then
  -- The queue's concurrency moved (its pool grew or shrank): the lanes it held back look again.
  Pool.wake(ARG.P, ARG.queue, now_ms())
end
redis.call('SADD', key_queues(ARG.P), ARG.queue)
for _, t in ipairs(redis.call('SRANDMEMBER', key_queue_tenants_full(ARG.P, ARG.queue), UNPARK_MAX)) do
  Tenant.unpark(ARG.P, ARG.queue, t)
end
return {'ok'}
