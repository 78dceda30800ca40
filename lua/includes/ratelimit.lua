-- Rate limits (seed: ojs-rate-limiting-spec.md), enforced inside FETCH without scanning limited work.
--
-- Lanes. An available job with a rate-limit key K in queue Q is not put straight into Q's ready set.
-- Each (Q, K) is a lane: the sorted set P..'q:'..Q..':lane:'..K holds the lane's jobs (same score and
-- member as a ready set), and at most one of them, the lane's head, sits in Q's ready set; the hash
-- P..'q:'..Q..':heads' maps K to the head's member. A lane is OPEN when its head is in the ready set,
-- PARKED when K is limited: then all its jobs wait in the lane set and none is in the ready set, so FETCH
-- never meets them. Parking costs one pop per lane per blocking episode, however many jobs the lane
-- holds; FETCH never scans the limited backlog. For a job with a tenant, Q here is its tenant's
-- sub-queue (includes/tenant.lua): lanes, heads and parked hashes, P..'rl:wake' members and K's queues
-- name the sub-queue, and a head enters the sub-queue's ready set.
--
-- A parked lane is re-opened (its best job moved back to the ready set) when K may run again: at once
-- when one of K's concurrency slots is released (ACK, NACK, cancel, lease expiry), or by the promote
-- timer at the time stored in P..'rl:wake' (member Q..'\n'..K, score = when to look again).
--
-- Per key K: P..'rl:'..K..':active' zset of job ids holding a concurrency slot, scored by lease
-- deadline (a slot whose lease lapsed no longer counts, so a killed worker cannot leak one);
-- P..'rl:'..K..':win' zset of start times in the sliding window; P..'rl:'..K..':tat' the throttle's
-- theoretical arrival time (GCRA with no burst: starts period/limit apart, never closer than 90% of it);
-- P..'rl:'..K..':until' a dynamic block (NACK with rate_limit_until); P..'rl:'..K..':ovr' an operator
-- override; P..'rl:'..K..':state' the blocking episode (for one rate_limit.exceeded per episode);
-- P..'rl:'..K..':queues' the queues whose lane for K holds jobs; P..'rl:keys' every key in use (lexicographic;
-- idle keys leave it, see "Idle keys" below).
--
-- A job's policy is its 'rl' field: "<concurrency> <rate_limit> <rate_period_ms> <throttle_limit>
-- <throttle_period_ms> <on_limit>[ <cost>][ ~<increase_after>[:<type>,<type>…]][ f<floor>]", '-' for an
-- absent limit; the cost only when not 1; the '~' token only for an adaptive policy (see "Adaptive");
-- the 'f' token only for a key with a floor (see "Burstable concurrency").
--
-- Costs (ours, beyond the seed). A job's cost (default 1) is the units it counts against each of the
-- key's limits: it holds u = max(1, min(cost, limit)) of each, so a job that costs more than a whole
-- limit runs alone rather than never (and a concurrency of 0 still pauses). Concurrency: the slot
-- holders' units are their count plus P..'rl:'..K..':active:units' (the sum of u - 1 over holders whose u
-- is not 1; each such holder's u in the hash P..'rl:'..K..':active:cost'), less what holders whose lease
-- lapsed hold (they no longer count, as above). Window: an entry is 'id:claim' for one unit, or
-- 'id:claim:u'; the window's units are its entries plus P..'rl:'..K..':win:units' (the sum of u - 1 over
-- them), and pruning an expired entry 'id:claim:u' takes its u - 1 back. Throttle: a start of u units
-- moves the next allowed start u intervals on. A key whose jobs all cost 1 never has either units key:
-- rl_check reads both in the MGET that reads the dynamic block, so such a key costs no extra command.
-- A lane still serves its jobs in order: when its head needs more units than are left, the lane parks
-- with the cheaper jobs behind it, so a costly job is never starved by cheap ones of its key, and a
-- cheaper one never overtakes a better-placed one.
-- The claim keeps in the job's 'rl_units' ("<concurrency u> <window u>", only when either is not 1)
-- what it took, so the release gives back exactly that, and an ACK that reports the units the job
-- really used (rl_used) corrects its window entry by the difference, at once.
--
-- Mixed policies on one key. A key's limits are ONE policy, its registry P..'rl:'..K..':policy': the
-- policy of the newest job enqueued with K (rl_register), with an operator override on top, field by
-- field (rl_effective). Every job of K is limited by it, whichever job heads a lane, and
-- GET /rate-limits/K shows exactly it. on_limit stays the job's own: it says what happens to that job.
-- An enqueue that changes the limits re-opens K's parked lanes, so a key paused by one job's
-- `concurrency: 0` runs again as soon as a later job of K says otherwise (or an override does).
--
-- Every parked lane has a way out: a wake time in P..'rl:wake' (window, throttle, dynamic block,
-- earliest lease deadline, override expiry), a slot release, an override set or lifted, or a change
-- of the key's policy. A lane parked with none of these (wake -1) is one whose effective concurrency
-- is 0 with no holder: it waits for the override or the policy that lifts the pause.
--
-- Idle keys. A key whose lanes are all empty and which has no slot holder is idle: its policy, episode
-- and counters expire RL_IDLE_MS later (rl_maybe_idle), unless a job of the key is enqueued first
-- (rl_register takes them back), and the timer drops it from P..'rl:keys' once they have
-- (promote-1.lua, from P..'rl:idle': key -> when it may go). Its window, throttle and dynamic block
-- already expire on their own; an operator override keeps its own expiry.
-- Adaptive (ours, beyond the seed). A key whose policy is adaptive keeps, in P..'rl:'..K..':adapt', its
-- effective concurrency and window limit while they are below the policy's ('concurrency',
-- 'rate_limit'), when it last went down ('down_at'), how many times it did ('round') and the successes
-- since ('ok'). A NACK that reports a rate limit (rate_limit_until, or an error type the policy names)
-- halves both, never below 1, and once per round: a claim of an adaptive key keeps the round it started
-- in (the job's 'rl_round'), and a job that started before the last decrease ran under the old limit
-- and does not halve it again (rl_adapt_down); every increase_after ACKs raise them one step, the concurrency by 1
-- and the window by a tenth of the policy's limit, up to the policy, where the fields leave
-- (rl_adapt_up); a success counts toward a step only while the key's slots are all taken (when only
-- its concurrency is below the policy's), so an idle key does not creep back up untested.
-- rl_effective applies them under the operator's override, which wins over both. Each
-- move is a rate_limit.adjusted event. A key whose policy is not adaptive never reads the hash; it
-- expires RL_IDLE_MS after its last move.
-- Burstable concurrency (ours, beyond the seed). A key with a floor F (the job's policy, 'f' token) and
-- a concurrency C (its ceiling) draws its slots from a shared pool (pool_pick): for a lane of a tenant's
-- sub-queue Q@T whose tenant has a concurrency in Q (the queue's tenancy setting, includes/tenant.lua),
-- the tenant's: S is that cap, its holders P..'q:'..Q..'@'..T..':rl:active', and the pool is named
-- Q@T in what follows; else the queue's: the queue-level concurrency S (PUT
-- /admin/queues/{q}/rate-limit), whose holders P..'q:'..Q..':rl:active' already count. A key below
-- its floor may take any free slot of the pool (the queue gate's or the tenant gate's own check). A key
-- at or above its floor borrows: it may start only while the pool's holders H plus the floors still
-- owed W leave a slot, H + W < S, and never past C. W is the queue conf's field 'want': the sum, over
-- the keys whose lane in the queue (or a tenant's sub-queue of it) is OPEN (or parked only by the key's
-- own concurrency, see lane_owes), of F minus the key's holders, when positive, each lane's part in the
-- hash P..'q:'..Q..':want' (lane -> part; a lane owed nothing has no field; the conf field leaves at 0).
-- A lane's part lives in its pool's hash; a lane of a sub-queue whose pool moved (the tenant's cap was
-- set or lifted) has its old part taken out of the other pool at its next sync; queue-conf-1.lua
-- re-syncs the queue's waiting lanes (a bounded number) when its pools move. So a slot a borrower
-- gives back goes to a key below its floor first, and an idle key (no ready job, or a lane its window,
-- throttle or a dynamic block holds back) reserves nothing: the pool is work-conserving. burst_sync keeps a key's part exact after each change of its holders or of its
-- lane's openness (FETCH's claim, park and discard; make_ready; unready; rl_release; lane_release). A
-- borrower that may not start parks its lane with strategy 'pool' in P..'q:'..Q..':pool:wait' (FIFO by
-- time) and in P..'rl:wake' POOL_RECHECK_MS on; a slot the queue gives back (active.lua leave_active)
-- and a part that shrinks re-open the waiting lanes (pool_wake), and FETCH's order (priority, then
-- FIFO) decides which borrows. A change of a key's floor or concurrency (a newer policy, an override,
-- an adaptive step) re-computes its parts. Holders and floors count jobs,
-- as the queue's concurrency does, whatever their cost. A lane without a pool (a queue without a
-- concurrency, a tenant without a cap there): a floor then means nothing and the key is limited by C
-- alone. A key whose jobs carry no floor never
-- reads or writes any of this.
-- CAPS: its loops visit the queues whose lane for a key holds jobs (at most the queues there are);
-- the expired window entries or lapsed slot holders of one key looked at per check (RL_PRUNE_MAX = 100:
-- more are pruned by the next checks, and until then they count, so a limit is never exceeded); a
-- spec's optional tokens (at most 3: the cost, the adaptive policy, the floor); an adaptive step's
-- limits (2); the waiting lanes a pool re-opens at once (pool_wake: at most POOL_WAKE_MAX = 10); the
-- parked lanes of a key a call re-opens (lane_wake: at most LANE_WAKE_MAX = 10).
--@include emit
--@include clock
--@include score

local RL_IDLE_MS = 86400000
local RL_PRUNE_MAX = 100
local POOL_RECHECK_MS = 1000
local POOL_WAKE_MAX = 10
-- Parked lanes of one key one call re-opens (lane_wake).
local LANE_WAKE_MAX = 10

local function rl_parse(spec)
  if not spec then return nil end
  local c, rl, rp, tl, tp, on, rest = string.match(spec, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)(.*)$')
  local p = { conc = tonumber(c), rate_limit = tonumber(rl), rate_period = tonumber(rp),
    throttle_limit = tonumber(tl), throttle_period = tonumber(tp), on_limit = on, cost = 1 }
  if rest and rest ~= '' then
    -- At most three tokens: the cost, the adaptive policy and the floor.
    for tok in string.gmatch(rest, '%S+') do
      local n, types = string.match(tok, '^~(%d+):?(.*)$')
      local floor = string.match(tok, '^f(%d+)$')
      if n then
        p.adapt = { after = tonumber(n), types = ',' .. types .. ',' }
      elseif floor then
        p.floor = tonumber(floor)
      else
        p.cost = tonumber(tok) or 1
      end
    end
  end
  return p
end

-- rl_units(cost, limit): the units a job of `cost` holds of a limit (see "Costs" above).
local function rl_units(cost, limit)
  if cost == 1 then return 1 end
  return math.max(1, math.min(cost, limit))
end

-- rl_units_held(text): the job's 'rl_units' field as numbers: concurrency units, window units.
local function rl_units_held(v)
  if not v then return 1, 1 end
  local c, w = string.match(v, '^(%d+) (%d+)$')
  return tonumber(c) or 1, tonumber(w) or 1
end

-- rl_policy(P, key, job_spec): the key's registry policy with the job's own on_limit (the job's whole
-- policy when the key has no registry yet, as for jobs enqueued before registries existed).
local function rl_policy(P, key, job_spec)
  local job = rl_parse(job_spec)
  local reg = rl_parse(redis.call('GET', key_rl_policy(P, key)))
  if not reg then return job end
  -- on_limit and cost are the job's own; the registry's (the newest job's) say nothing of this one.
  reg.cost = 1
  if job then reg.on_limit, reg.cost = job.on_limit, job.cost end
  return reg
end

-- The limits in force for key K: the operator's override, field by field, over the key's policy.
local function rl_effective(P, key, pol)
  local o = redis.call('HMGET', key_rl_ovr(P, key), 'concurrency', 'rate_limit', 'rate_period',
    'throttle_limit', 'throttle_period')
  local e = { conc = pol.conc, rate_limit = pol.rate_limit, rate_period = pol.rate_period,
    throttle_limit = pol.throttle_limit, throttle_period = pol.throttle_period, on_limit = pol.on_limit,
    cost = pol.cost or 1, floor = pol.floor }
  if pol.adapt then
    local a = redis.call('HMGET', key_rl_adapt(P, key), 'concurrency', 'rate_limit', 'round')
    if a[1] and e.conc then e.conc = math.min(e.conc, tonumber(a[1])) end
    if a[2] and e.rate_limit then e.rate_limit = math.min(e.rate_limit, tonumber(a[2])) end
    e.round = a[3] or '0'
  end
  if o[1] then e.conc = tonumber(o[1]) end
  if o[2] then e.rate_limit, e.rate_period = tonumber(o[2]), tonumber(o[3]) end
  if o[4] then e.throttle_limit, e.throttle_period = tonumber(o[4]), tonumber(o[5]) end
  e.ovr = o
  return e
end

-- rl_overridden(e, strategy): whether the limit rl_check named (`strategy`) is the override's, not the
-- key's policy (read by job-explain-1.lua; e from rl_effective).
local function rl_overridden(e, strategy)
  local i = ({ concurrency = 1, rate = 2, throttle = 4 })[strategy]
  return i ~= nil and e.ovr ~= nil and e.ovr[i] ~= false
end

-- pool_pick(q, conc, tq): the pool a lane in q (a queue, or a tenant's sub-queue of it) draws floors
-- from, given its queue's concurrency conc and tenancy setting tq (decoded): its name and size (see
-- "Burstable concurrency"); nil when it has none.
local function pool_pick(q, conc, tq)
  local queue, tenant = base_queue(q)
  local cap = tenant and tenant_cap(tq, tenant)
  if cap then return q, cap end
  if conc then return queue, conc end
  return nil
end

-- pool_of(P, q): pool_pick with q's queue's settings read (one HMGET).
local function pool_of(P, q)
  local c = redis.call('HMGET', key_queue_conf(P, (base_queue(q))), 'rl_concurrency', 'tenancy')
  return pool_pick(q, tonumber(c[1]), tenancy_decode(c[2]))
end

-- pool_owed(w, gen): the floors owed in a pool whose conf fields want and want_gen are w, in a queue whose
-- pool generation is gen: none when they were owed in an earlier pool (burst_part resets them).
local function pool_owed(w, gen)
  if (w[2] or '') ~= gen then return 0 end
  return whole(w[1]) or 0
end

-- rl_pool(P, e, q, l): limits e (rl_effective) of a key with a floor learn the pool of its lane in q
-- (pool_pick, from l: gates.lua queue_settings of q's queue), and the floors owed there now (one HGET).
-- Nothing for a key without a floor or a lane without a pool. The floor never exceeds the key's ceiling.
local function rl_pool(P, e, q, l)
  if not (e.floor and e.conc) then return end
  local pool, size = pool_pick(q, l.conc, l.tenancy)
  if not pool then return end
  e.floor = math.min(e.floor, e.conc)
  e.pool_size, e.pool_queue = size, pool
  e.pool_want = pool_owed(redis.call('HMGET', key_queue_conf(P, pool), 'want', 'want_gen'), l.pool_gen)
end

-- Throttle state P..'rl:'..K..':tat' = "<next allowed ms> <interval ms> <last start ms>" (GCRA with no
-- burst). The interval that computed it is kept so that when the key's throttle changes (a policy
-- change, an override set, lifted or expired) the next start is re-derived from the new interval:
-- the previous allowed time + the new interval, never closer than 90% of it to the last start. A
-- bare number (older data) is taken as the next allowed time.
local THROTTLE_KEEP_MS = 86400000
local function throttle_allowed(P, key, interval)
  local v = redis.call('GET', key_rl_tat(P, key))
  if not v then return 0 end
  local nxt, iv, last = string.match(v, '^(%S+) (%S+) (%S+)$')
  if not nxt then return tonumber(v) or 0 end
  nxt, iv, last = tonumber(nxt), tonumber(iv), tonumber(last)
  if iv == interval then return nxt end
  return math.max(nxt - iv + interval, last + math.floor(interval * 0.9))
end

local function throttle_interval(e)
  return math.floor(e.throttle_period / e.throttle_limit)
end

-- rl_held_units(P, key, now, extra): the units K's unexpired slot holders hold, given `extra`, the value
-- of P..'rl:'..K..':active:units' (nil: every holder holds one). Holders whose lease lapsed hold nothing:
-- at most RL_PRUNE_MAX of them are looked at (past that, the rest still count until taken back).
local function rl_held_units(P, key, now, extra)
  local ak = key_rl_active(P, key)
  local held = redis.call('ZCOUNT', ak, '(' .. now, '+inf')
  if not extra then return held end
  held = held + tonumber(extra)
  local lapsed = redis.call('ZRANGE', ak, '-inf', now, 'BYSCORE', 'LIMIT', 0, RL_PRUNE_MAX)
  if #lapsed > 0 then
    for _, u in ipairs(redis.call('HMGET', key_rl_active_cost(P, key), unpack(lapsed))) do
      if u then held = held - (tonumber(u) - 1) end
    end
  end
  return held
end

-- rl_window_units(P, key, period, now, extra, prune): the units of K's window (see "Costs"), given
-- `extra`, the value of P..'rl:'..K..':win:units' (nil: every entry is one unit). With `prune`, expired
-- entries leave the window (and their units the count); without, they are only left out (inspection).
local function rl_window_units(P, key, period, now, extra, prune)
  local wk = key_rl_win(P, key)
  local cut = now - period
  if not extra then
    if not prune then return redis.call('ZCOUNT', wk, '(' .. cut, '+inf') end
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', cut)
    return redis.call('ZCARD', wk)
  end
  extra = tonumber(extra)
  local gone = redis.call('ZRANGE', wk, '-inf', cut, 'BYSCORE', 'LIMIT', 0, RL_PRUNE_MAX)
  local back = 0
  for _, m in ipairs(gone) do
    local u = string.match(m, '^[^:]+:%d+:(%d+)$')
    if u then back = back + tonumber(u) - 1 end
  end
  if prune and #gone > 0 then
    redis.call('ZREMRANGEBYRANK', wk, 0, #gone - 1)
    if back ~= 0 then redis.call('INCRBY', key_rl_win_units(P, key), -back) end
    return redis.call('ZCARD', wk) + extra - back
  end
  return redis.call('ZCARD', wk) - #gone + extra - back
end

-- rl_check: may one more job of key K start now under limits e (its cost e.cost)?
-- Returns nil when it may; else strategy, limit, current, wake_at (ms, or -1 for "when released").
-- current is in units. An override that expires before wake_at brings wake_at forward: its expiry
-- changes the limits. A job that needs more units than are left waits for the oldest window entry
-- (or the earliest lease) to go, and is checked again then.
local function rl_check(P, key, e, now)
  local strategy, limit, current, wake
  -- One command for the dynamic block and both units counters (absent for a key whose jobs cost 1).
  local m = redis.call('MGET', key_rl_until(P, key), key_rl_win_units(P, key), key_rl_active_units(P, key))
  local until_ms = tonumber(m[1] or '0')
  if until_ms > now then
    strategy, limit, current, wake = 'dynamic', 0, 0, until_ms
  end
  if not strategy and e.conc then
    local active = rl_held_units(P, key, now, m[3])
    if active + rl_units(e.cost, e.conc) > e.conc then
      local first = redis.call('ZRANGE', key_rl_active(P, key), '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
      strategy, limit, current, wake = 'concurrency', e.conc, active, first[2] and tonumber(first[2]) or -1
    elseif e.pool_size then
      -- A key with a floor, in a lane with a pool (rl_pool): past its floor it only borrows.
      local jobs = m[3] and redis.call('ZCOUNT', key_rl_active(P, key), '(' .. now, '+inf') or active
      if jobs >= e.floor then
        local used = redis.call('ZCOUNT', key_queue_rl_active(P, e.pool_queue), '(' .. now, '+inf') + e.pool_want
        if used >= e.pool_size then
          strategy, limit, current, wake = 'pool', e.pool_size, used, now + POOL_RECHECK_MS
        end
      end
    end
  end
  if not strategy and e.rate_limit and e.rate_period then
    local n = rl_window_units(P, key, e.rate_period, now, m[2], true)
    if n + rl_units(e.cost, e.rate_limit) > e.rate_limit then
      local oldest = redis.call('ZRANGE', key_rl_win(P, key), 0, 0, 'WITHSCORES')
      strategy, limit, current = 'rate', e.rate_limit, n
      wake = oldest[2] and tonumber(oldest[2]) + e.rate_period or now
    end
  end
  if not strategy and e.throttle_limit and e.throttle_period then
    local allowed = throttle_allowed(P, key, throttle_interval(e))
    if allowed > now then strategy, limit, current, wake = 'throttle', e.throttle_limit, 1, allowed end
  end
  if not strategy then return nil end
  -- PTTL 0: the override expires this very millisecond (Redis expires a key only after its time), so
  -- the lane must wake now, not when the override's own limits would have let it.
  local ovr_ttl = redis.call('PTTL', key_rl_ovr(P, key))
  if ovr_ttl >= 0 and (wake < 0 or now + ovr_ttl < wake) then wake = now + ovr_ttl end
  return strategy, limit, current, wake
end

-- rl_take: job id starts under key K with limits e, as claim number `claim` (its lease id); its slot
-- lasts until `lease`. The window entry is id:claim (id:claim:u for u units), unique per start: a
-- give-back of the attempt (requeue, rate_limit_until, dead-letter retry) can never make a later start
-- overwrite this one. Returns the job's 'rl_units' value ("<concurrency u> <window u>"), or nil when
-- it took one unit of each (the claim keeps it in the record, see "Costs").
local function rl_take(P, key, e, id, claim, lease, now)
  local cu, wu = 1, 1
  if e.conc then
    redis.call('ZADD', key_rl_active(P, key), lease, id)
    cu = rl_units(e.cost, e.conc)
    if cu ~= 1 then
      redis.call('HSET', key_rl_active_cost(P, key), id, cu)
      redis.call('INCRBY', key_rl_active_units(P, key), cu - 1)
    end
  end
  if e.rate_limit and e.rate_period then
    wu = rl_units(e.cost, e.rate_limit)
    redis.call('ZADD', key_rl_win(P, key), now, id .. ':' .. claim .. (wu ~= 1 and ':' .. wu or ''))
    redis.call('PEXPIRE', key_rl_win(P, key), e.rate_period)
    if wu ~= 1 then
      redis.call('INCRBY', key_rl_win_units(P, key), wu - 1)
      redis.call('PEXPIRE', key_rl_win_units(P, key), e.rate_period)
    end
  end
  if e.throttle_limit and e.throttle_period then
    -- Next start at the previous allowed time + interval, so a start that came a little late (waiting
    -- for a FETCH) does not push every later one back; but never closer than 90% of the interval.
    -- A start of u units counts as u starts.
    local interval = throttle_interval(e)
    local span = interval * rl_units(e.cost, e.throttle_limit)
    local nxt = math.max(throttle_allowed(P, key, interval) + span, now + math.floor(span * 0.9))
    redis.call('SET', key_rl_tat(P, key), nxt .. ' ' .. interval .. ' ' .. now, 'PX', span + THROTTLE_KEEP_MS)
  end
  if cu == 1 and wu == 1 then return nil end
  return cu .. ' ' .. wu
end

-- rl_maybe_idle(P, key): when K has no lane holding jobs and no slot holder, its per-key state starts
-- to expire (see "Idle keys" above). O(1).
local function rl_maybe_idle(P, key)
  if redis.call('EXISTS', key_rl_queues(P, key), key_rl_active(P, key)) > 0 then return end
  for _, k in ipairs({key_rl_policy(P, key), key_rl_state(P, key), key_rl_stats(P, key)}) do
    redis.call('PEXPIRE', k, RL_IDLE_MS)
  end
  redis.call('ZADD', key_rl_idle(P), now_ms() + RL_IDLE_MS, key)
end

-- lane helpers -------------------------------------------------------------------------------------

-- rl_active(P, key, now): jobs holding an unexpired concurrency slot of K.
local function rl_active(P, key, now)
  return redis.call('ZCOUNT', key_rl_active(P, key), '(' .. now, '+inf')
end

-- rl_waiting(P, key): available jobs of K, in its lanes and as their heads, across its queues.
local function rl_waiting(P, key)
  local waiting = 0
  for _, queue in ipairs(redis.call('SMEMBERS', key_rl_queues(P, key))) do
    waiting = waiting + redis.call('ZCARD', key_queue_lane(P, queue, key))
      + redis.call('HEXISTS', key_queue_heads(P, queue), key)
  end
  return waiting
end

-- lane_open(P, queue, key, settled): move the lane's best job into the ready set, if it has none there.
-- Returns the head's job id, or nil when the lane is empty or already open. `settled`: the caller knows
-- the queue is not being re-scored (FETCH serves no such queue), so the moved job keeps its score
-- without asking (moved_score's HEXISTS, one command per claim of a rate-limited job).
local function lane_open(P, queue, key, settled)
  local hk = key_queue_heads(P, queue)
  if redis.call('HEXISTS', hk, key) == 1 then return nil end
  if redis.call('HDEL', key_queue_parked(P, queue), key) == 1 then
    redis.call('ZREM', key_rl_parked(P, key), queue)
  end
  local best = redis.call('ZPOPMIN', key_queue_lane(P, queue, key))
  if #best == 0 then
    -- The lane is empty (its last job was claimed, ended or moved): the queue no longer has one for K.
    redis.call('SREM', key_rl_queues(P, key), queue)
    rl_maybe_idle(P, key)
    return nil
  end
  local score = tonumber(best[2])
  if not settled then score = moved_score(P, queue, best[1], score) end
  ready_put(P, queue, score, best[1])
  redis.call('HSET', hk, key, best[1])
  return string.sub(best[1], -36)
end

-- lane_park(P, queue, key, member, score, wake, strategy, floor, pool, now): the lane's popped head could
-- not start because of `strategy` (concurrency, rate, throttle, dynamic, pool); keep it (when member is
-- given) with the lane's other jobs, out of the ready set, until `wake` (ms; -1 = until a slot of the
-- key is released). The parked hash holds '<wake> <strategy>[ f<floor>]', so the lane's release can
-- say what held it and, for a key with a floor in a pool (see "Burstable concurrency"), what it owes
-- once open again. A lane its pool (named `pool`) holds back also waits in the pool's FIFO
-- P..'q:'..pool..':pool:wait'. Every parked lane of K is listed in P..'rl:'..K..':parked' by when it
-- parked (last), which a release wakes in that order, a few at a time (lane_wake).
local function lane_park(P, queue, key, member, score, wake, strategy, floor, pool, now)
  if member then redis.call('ZADD', key_queue_lane(P, queue, key), score, member) end
  redis.call('HSET', key_queue_parked(P, queue), key, wake .. ' ' .. strategy .. (floor and ' f' .. floor or ''))
  redis.call('ZADD', key_rl_parked(P, key), now, queue)
  if wake >= 0 then redis.call('ZADD', key_rl_wake(P), wake, queue .. '\n' .. key) end
  if strategy == 'pool' then
    local pk = key_queue_pool_wait(P, pool)
    redis.call('ZADD', pk, 'NX', wake - POOL_RECHECK_MS, queue .. '\n' .. key)
    redis.call('PEXPIRE', pk, RL_IDLE_MS)
  end
end

-- Burstable concurrency (see above): burst_sync and burst_floor_of are declared here, as lane_release
-- calls them and burst_sync calls lane_release (through pool_wake).
local burst_sync, burst_floor_of

-- lane_release(P, queue, key, now): re-open a parked lane (a slot came back, its wake time came, or
-- its limits changed) and emit rate_limit.released with the strategy that had held it (seed §11.1:
-- key, strategy, job_id). Returns the new head's id, or nil when the lane had nothing to open.
local function lane_release(P, queue, key, now)
  local held = redis.call('HGET', key_queue_parked(P, queue), key)
  local head = lane_open(P, queue, key)
  if head then
    local strategy = held and string.match(held, '^%S+ (%S+)') or 'concurrency'
    ev_rate_limit_released(P, head, (base_queue(queue)), '', now, key, strategy)
  end
  -- A lane of a key with a floor owes it again once open, and nothing once empty (the floor as it is
  -- now: the mark only says the key had one when its lane parked).
  if held and string.find(held, ' f%d+$') then
    local pol = rl_policy(P, key, nil)
    local floor, pool = nil, nil
    if pol then floor, pool = burst_floor_of(P, queue, rl_effective(P, key, pol)) end
    burst_sync(P, queue, key, floor or 0, now, nil, floor and 0 or nil, pool)
  end
  return head
end

-- pool_wake(P, pool, now): a slot of the pool came back, or fewer are owed (see "Burstable
-- concurrency"; pool: a queue's name, or a tenant's sub-queue's): re-open the lanes the pool holds
-- back, the oldest POOL_WAKE_MAX (the others' own timers look again), so that FETCH's order (priority, then FIFO) decides who borrows; a re-opened
-- lane that still may not borrow parks again when FETCH meets it.
local function pool_wake(P, pool, now)
  local popped = redis.call('ZPOPMIN', key_queue_pool_wait(P, pool), POOL_WAKE_MAX)
  for i = 1, #popped, 2 do
    local lane = popped[i]
    local q, key = string.match(lane, '^(.-)\n(.*)$')
    if q then
      redis.call('ZREM', key_rl_wake(P), lane)
      lane_release(P, q, key, now)
    end
  end
end

-- lane_owes(P, q, key): K's lane in q claims its floor: it is open, or parked only by the key's own
-- concurrency (a job that costs more than the units left), which gives it back with its next release.
-- A lane parked by its window, throttle, a dynamic block or the pool itself owes nothing meanwhile.
local function lane_owes(P, q, key)
  if redis.call('HEXISTS', key_queue_heads(P, q), key) == 1 then return true end
  local parked = redis.call('HGET', key_queue_parked(P, q), key)
  return parked ~= false and string.match(parked, '^%S+ concurrency') ~= nil
end

-- burst_skip(held, floor, delta): a sync can be left out. `delta` is how the caller moved the key's
-- holders (+1 a claim, -1 a release, 0 none; nil when its floor may have moved: never left out). Every
-- part was last computed with the same floor (a floor moves only through a sync of every lane, nil
-- delta), and with the holders before the move: when those and the holders now are both at least the
-- floor, the part was 0 and stays 0, whatever the lane. So a key above its floor, the common case under
-- load, pays one ZCOUNT. (One floor moves without a sync: an override's expiry, for a key whose
-- adaptation holds its concurrency below its floor; its parts then stay high, which only makes the
-- borrowers wait more, until its next sync.)
local function burst_skip(held, floor, delta)
  return delta ~= nil and held - math.max(delta, 0) >= floor
end

-- burst_part(P, pool, lane, part, now): the lane's part of the floors owed in the pool becomes `part`
-- (the field lane of P..'q:'..pool..':want', summed in the pool's conf field 'want', which leaves at
-- 0); a part that shrinks re-opens lanes the pool holds back.
local function burst_part(P, pool, lane, part, now)
  local wk = key_queue_want(P, pool)
  local ck = key_queue_conf(P, pool)
  -- Parts owed in an earlier pool (the queue's pool_gen moved since: the pool came or went) leave first.
  local gen = redis.call('HGET', key_queue_conf(P, (base_queue(pool))), 'pool_gen') or ''
  -- (want_gen is kept only while something is owed, so a pool's conf leaves with its last part.)
  if (redis.call('HGET', ck, 'want_gen') or '') ~= gen then
    redis.call('DEL', wk)
    redis.call('HDEL', ck, 'want', 'want_gen')
  end
  local old = whole(redis.call('HGET', wk, lane)) or 0
  if part == old then return end
  if part == 0 then redis.call('HDEL', wk, lane) else redis.call('HSET', wk, lane, part) end
  if incr(ck, 'want', part - old) == 0 then
    redis.call('HDEL', ck, 'want', 'want_gen')
  elseif gen ~= '' then
    redis.call('HSET', ck, 'want_gen', gen)
  end
  if part < old then pool_wake(P, pool, now) end
end

-- burst_sync(P, q, key, floor, now, held, delta, pool): key K, whose floor in the pool of its lane in q
-- (the queue or a tenant's sub-queue of it; pool_pick names it `pool`, nil for none) is `floor`,
-- changed its holders (now `held`, nil: count them), or its lane in q opened or closed: its part of the
-- floors owed in the pool (burst_part, field q..'\n'..K) becomes exact. A lane of a sub-queue has its
-- part taken out of the other pool it may draw from (the queue's, or the tenant's), where a change of
-- the tenant's cap may have left it. delta: see burst_skip.
burst_sync = function(P, q, key, floor, now, held, delta, pool)
  held = held or rl_active(P, key, now)
  if burst_skip(held, floor, delta) then return end
  local queue = base_queue(q)
  local part = 0
  if pool and floor > held and lane_owes(P, q, key) then part = floor - held end
  local lane = q .. '\n' .. key
  local home = pool or queue
  burst_part(P, home, lane, part, now)
  if q ~= queue then burst_part(P, home == q and queue or q, lane, 0, now) end
end

-- burst_floor_of(P, q, e): the floor a key of limits e (rl_effective) owes in the pool of its lane in q
-- (pool_of: one HMGET), at most its effective concurrency, and the pool's name; nil when it has no floor
-- or the lane no pool.
burst_floor_of = function(P, q, e)
  if not (e.floor and e.conc) then return nil end
  local pool = pool_of(P, q)
  if not pool then return nil end
  return math.min(e.floor, e.conc), pool
end

-- burst_floor(P, q, key, spec): burst_floor_of for a job of policy `spec`; nil, with no command, when
-- the spec has no floor.
local function burst_floor(P, q, key, spec)
  if not (spec and string.find(spec, ' f', 1, true)) then return nil end
  return burst_floor_of(P, q, rl_effective(P, key, rl_policy(P, key, spec)))
end

-- burst_sync_all(P, key, e, now, also, delta): burst_sync for every lane of K, whose holders or limits
-- changed (e: its limits now, rl_effective), and for its lane in `also` (nil, or a queue whose lane may
-- just have emptied, and so left P..'rl:'..K..':queues'); a lane whose queue has no pool, or a key no
-- longer with a floor, owes nothing. delta: see burst_skip (checked once, against the floor at most).
local function burst_sync_all(P, key, e, now, also, delta)
  local held = rl_active(P, key, now)
  if burst_skip(held, e.floor and e.conc and math.min(e.floor, e.conc) or 0, delta) then return end
  local queues = redis.call('SMEMBERS', key_rl_queues(P, key))
  if also then queues[#queues + 1] = also end
  local seen = {}
  for _, q in ipairs(queues) do
    if not seen[q] then
      seen[q] = true
      local floor, pool = burst_floor_of(P, q, e)
      burst_sync(P, q, key, floor or 0, now, held, delta, pool)
    end
  end
end

-- lane_add(P, queue, key, score, member): a job of key K became available in queue Q.
local function lane_add(P, queue, key, score, member)
  redis.call('ZADD', key_queue_lane(P, queue, key), score, member)
  redis.call('SADD', key_rl_queues(P, key), queue)
  if redis.call('HEXISTS', key_queue_parked(P, queue), key) == 1 then return end
  if redis.call('HEXISTS', key_queue_heads(P, queue), key) == 1 then
    return 'rebalance'
  end
  lane_open(P, queue, key)
end

-- lane_rebalance(P, queue, key): keep an open lane's head its best job (after an enqueue, a PATCH, or
-- the re-scoring of the lane when the queue's aging changed).
local function lane_rebalance(P, queue, key)
  local hk = key_queue_heads(P, queue)
  local head = redis.call('HGET', hk, key)
  if not head then return end
  local lk = key_queue_lane(P, queue, key)
  local best = redis.call('ZRANGE', lk, 0, 0, 'WITHSCORES')
  if #best == 0 then return end
  local rk = key_queue_ready(P, queue)
  local held = tonumber(redis.call('ZSCORE', rk, head))
  if not held then
    -- A head no longer in the ready set (its job left it by other means: its record vanished or was
    -- corrupt, FETCH dropped the member): the lane opens anew (issue 40).
    redis.call('HDEL', hk, key)
    lane_open(P, queue, key)
    return
  end
  local hs = moved_score(P, queue, head, held)
  local bs = moved_score(P, queue, best[1], tonumber(best[2]))
  if bs < hs or (bs == hs and best[1] < head) then
    redis.call('ZREM', rk, head)
    redis.call('ZADD', lk, hs, head)
    redis.call('ZREM', lk, best[1])
    redis.call('ZADD', rk, bs, best[1])
    redis.call('HSET', hk, key, best[1])
  end
end

-- lane_wake(P, key, now, upto): re-open the parked lanes of key K that parked first, LANE_WAKE_MAX at
-- most, and only those that parked at `upto` or before (ms; nil: any); FETCH parks again those still
-- held. Bounded work whatever the number of lanes (issue 37 item 10: one release re-opened every lane,
-- O(tenants) per job with 10,000 tenants on one key). Returns the first head it opened (or nil) and
-- whether parked lanes it could not take remain.
local function lane_wake(P, key, now, upto)
  local pk = key_rl_parked(P, key)
  local lanes = redis.call('ZRANGE', pk, '-inf', upto or '+inf', 'BYSCORE', 'LIMIT', 0, LANE_WAKE_MAX + 1)
  local more = #lanes > LANE_WAKE_MAX
  local opened = nil
  for i = 1, math.min(#lanes, LANE_WAKE_MAX) do
    local queue = lanes[i]
    local head = lane_release(P, queue, key, now)
    -- A lane that was not parked after all (an older build's index) leaves the index.
    redis.call('ZREM', pk, queue)
    if head then
      opened = opened or head
      redis.call('ZREM', key_rl_wake(P), queue .. '\n' .. key)
    end
  end
  redis.call('DEL', key_rl_state(P, key))
  return opened, more
end

-- lane_wake_all(P, key, now): K's limits changed (its policy, an override, an adaptive step, units
-- given back): every lane parked until now is to be judged again. lane_wake takes the first; the promote
-- timer the rest (P..'rl:rewake': key -> when its limits changed; promote-1.lua), a few per tick.
local function lane_wake_all(P, key, now)
  local opened, more = lane_wake(P, key, now, now)
  if more then redis.call('ZADD', key_rl_rewake(P), now, key) end
  return opened
end

-- rl_release(P, key, id, now, units, spec): job id (policy `spec`) gives back its concurrency slot of
-- key K, which held `units` (the first of its 'rl_units', 1 when it has none).
local function rl_release(P, key, id, now, units, spec)
  if redis.call('ZREM', key_rl_active(P, key), id) == 1 then
    -- A key with a floor owes one more where its lanes are open (see "Burstable concurrency").
    if spec and string.find(spec, ' f', 1, true) then
      burst_sync_all(P, key, rl_effective(P, key, rl_policy(P, key, spec)), now, nil, -1)
    end
    if units ~= 1 and redis.call('HDEL', key_rl_active_cost(P, key), id) == 1 then
      if redis.call('DECRBY', key_rl_active_units(P, key), units - 1) == 0 then
        redis.call('DEL', key_rl_active_units(P, key))
      end
    end
    -- A slot came back: the lanes that parked first may take it (a few; the others at the next
    -- releases, in their order). A key with a lane that holds jobs is not idle: only a key with none asks.
    lane_wake(P, key, now, nil)
    if redis.call('EXISTS', key_rl_queues(P, key)) == 0 then rl_maybe_idle(P, key) end
  end
end

-- rl_used(P, key, id, claim, units, used, now): the ACK of job id's claim `claim`, whose window entry
-- counted `units`, reports it really used `used` units: the entry, if still in the window, counts
-- `used` from now on, and when that frees units K's parked lanes re-open at once.
local function rl_used(P, key, id, claim, units, used, now)
  if used == units then return end
  local wk = key_rl_win(P, key)
  local old = id .. ':' .. claim .. (units ~= 1 and ':' .. units or '')
  local at = redis.call('ZSCORE', wk, old)
  if not at then return end
  -- The new entry goes in before the old one leaves, so the window never empties: an emptied zset is
  -- deleted, and the ZADD after it would make a new one without the window's expiry.
  redis.call('ZADD', wk, at, id .. ':' .. claim .. (used ~= 1 and ':' .. used or ''))
  redis.call('ZREM', wk, old)
  local xk = key_rl_win_units(P, key)
  redis.call('INCRBY', xk, used - units)
  -- The counter lives as long as the window's newest entry can.
  redis.call('PEXPIRE', xk, math.max(redis.call('PTTL', wk), 1))
  if used < units then lane_wake_all(P, key, now) end
end

-- rl_register(P, key, spec, now): a job with policy `spec` was enqueued with key K: K is listed in
-- P..'rl:keys' (and no longer idle), and its policy becomes the key's (newest wins). When the limits change, K's parked lanes re-open so that FETCH judges them
-- by the new limits (a stricter policy re-parks them at the next FETCH).
local function rl_limits_part(spec)
  -- The five limit fields, the adaptive policy and the floor: on_limit and the cost are the job's own.
  if not spec then return nil end
  return (string.match(spec, '^(%S+ %S+ %S+ %S+ %S+)') or spec) .. (string.match(spec, ' (~%S+)') or '')
    .. (string.match(spec, ' (f%d+)') or '')
end

local function rl_register(P, key, spec, now)
  redis.call('ZADD', key_rl_keys(P), 0, key)
  if redis.call('ZREM', key_rl_idle(P), key) == 1 then
    -- K was idle: its counters and episode stay again (SET below takes the policy's expiry away).
    redis.call('PERSIST', key_rl_stats(P, key))
    redis.call('PERSIST', key_rl_state(P, key))
  end
  local old = redis.call('SET', key_rl_policy(P, key), spec, 'GET')
  if old and rl_limits_part(old) ~= rl_limits_part(spec) then
    lane_wake_all(P, key, now)
    -- A floor that came, went or moved changes what the key owes its pools.
    if string.find(old .. spec, ' f', 1, true) then
      burst_sync_all(P, key, rl_effective(P, key, rl_policy(P, key, spec)), now)
    end
  end
end

-- Adaptive limits (see "Adaptive" above) -------------------------------------------------------------

-- rl_adapt_down(P, key, pol, round, now, id, queue, jtype): job id of key K, whose policy pol is
-- adaptive and which started in round `round` (its 'rl_round'), met a rate limit downstream: halve K's
-- effective concurrency and window limit, unless the job started before the last decrease.
local function rl_adapt_down(P, key, pol, round, now, id, queue, jtype)
  local ak = key_rl_adapt(P, key)
  local a = redis.call('HMGET', ak, 'concurrency', 'rate_limit', 'round')
  if (a[3] or '0') ~= (round or '0') then return end
  -- Two limits: the concurrency and the window.
  for _, st in ipairs({ { 'concurrency', 'concurrency', a[1], pol.conc }, { 'rate_limit', 'rate', a[2], pol.rate_limit } }) do
    local field, strategy, limit = st[1], st[2], st[4]
    if limit and limit >= 1 then
      local cur = tonumber(st[3]) or limit
      local to = math.max(1, math.floor(cur / 2))
      if to ~= cur then
        redis.call('HSET', ak, field, to)
        ev_rate_limit_adjusted(P, id, queue, jtype, now, key, strategy, cur, to, 'rate_limited')
      end
    end
  end
  redis.call('HSET', ak, 'down_at', now, 'ok', 0, 'round', (tonumber(a[3]) or 0) + 1)
  redis.call('PEXPIRE', ak, RL_IDLE_MS)
  -- A floor above the new concurrency is owed only up to it.
  if pol.floor then burst_sync_all(P, key, rl_effective(P, key, pol), now) end
end

-- rl_adapt_up(P, key, pol, now, id, queue, jtype): job id of key K, whose policy pol is adaptive,
-- succeeded: every pol.adapt.after such successes raise K's effective limits one step toward the
-- policy's (a field at the policy leaves the hash), and K's parked lanes re-open to use the room.
local function rl_adapt_up(P, key, pol, now, id, queue, jtype)
  local ak = key_rl_adapt(P, key)
  local a = redis.call('HMGET', ak, 'concurrency', 'rate_limit')
  if not a[1] and not a[2] then return end
  -- Only a success at the limit says the limit could be higher: a key with room for one more job of
  -- this one's cost learns nothing about the upstream (the job itself still holds its slot here). The
  -- limit counts units: a key whose jobs cost 2 is at a limit of 4 with two jobs (issue 37 item 9).
  if a[1] and not a[2] then
    local conc = tonumber(a[1])
    local held = rl_held_units(P, key, now, redis.call('GET', key_rl_active_units(P, key)))
    if held + rl_units(pol.cost or 1, conc) <= conc then return end
  end
  if incr(ak, 'ok', 1) < pol.adapt.after then return end
  -- Two limits: the concurrency and the window.
  local steps = { { 'concurrency', 'concurrency', a[1], pol.conc, 1 },
    { 'rate_limit', 'rate', a[2], pol.rate_limit, pol.rate_limit and math.max(1, math.floor(pol.rate_limit / 10)) } }
  for _, st in ipairs(steps) do
    local field, strategy, cur, limit, step = st[1], st[2], tonumber(st[3]), st[4], st[5]
    if cur then
      if not limit or cur + step >= limit then
        redis.call('HDEL', ak, field)
        if limit then ev_rate_limit_adjusted(P, id, queue, jtype, now, key, strategy, cur, limit, 'recovered') end
      else
        redis.call('HSET', ak, field, cur + step)
        ev_rate_limit_adjusted(P, id, queue, jtype, now, key, strategy, cur, cur + step, 'recovered')
      end
    end
  end
  redis.call('HSET', ak, 'ok', 0)
  redis.call('PEXPIRE', ak, RL_IDLE_MS)
  lane_wake_all(P, key, now)
  if pol.floor then burst_sync_all(P, key, rl_effective(P, key, pol), now) end
end

-- rl_adaptive(P, key, spec): the key's policy when the job's spec and the key's policy are adaptive,
-- else nil (a job whose spec has no '~' costs nothing here).
local function rl_adaptive(P, key, spec)
  if not (key and spec and string.find(spec, '~', 1, true)) then return nil end
  local pol = rl_policy(P, key, spec)
  return pol and pol.adapt and pol
end
