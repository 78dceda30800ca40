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
-- <throttle_period_ms> <on_limit>", '-' for an absent limit.
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
-- CAPS: its loops visit the queues whose lane for a key holds jobs (at most the queues there are).
--@include emit
--@include clock
--@include score

local RL_IDLE_MS = 86400000

local function rl_parse(spec)
  if not spec then return nil end
  local c, rl, rp, tl, tp, on = string.match(spec, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  return { conc = tonumber(c), rate_limit = tonumber(rl), rate_period = tonumber(rp),
    throttle_limit = tonumber(tl), throttle_period = tonumber(tp), on_limit = on }
end

-- rl_policy(P, key, job_spec): the key's registry policy with the job's own on_limit (the job's whole
-- policy when the key has no registry yet, as for jobs enqueued before registries existed).
local function rl_policy(P, key, job_spec)
  local job = rl_parse(job_spec)
  local reg = rl_parse(redis.call('GET', key_rl_policy(P, key)))
  if not reg then return job end
  if job then reg.on_limit = job.on_limit end
  return reg
end

-- The limits in force for key K: the operator's override, field by field, over the key's policy.
local function rl_effective(P, key, pol)
  local o = redis.call('HMGET', key_rl_ovr(P, key), 'concurrency', 'rate_limit', 'rate_period',
    'throttle_limit', 'throttle_period')
  local e = { conc = pol.conc, rate_limit = pol.rate_limit, rate_period = pol.rate_period,
    throttle_limit = pol.throttle_limit, throttle_period = pol.throttle_period, on_limit = pol.on_limit }
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

-- rl_check: may one more job of key K start now under limits e?
-- Returns nil when it may; else strategy, limit, current, wake_at (ms, or -1 for "when released").
-- An override that expires before wake_at brings wake_at forward: its expiry changes the limits.
local function rl_check(P, key, e, now)
  local strategy, limit, current, wake
  local until_ms = tonumber(redis.call('GET', key_rl_until(P, key)) or '0')
  if until_ms > now then
    strategy, limit, current, wake = 'dynamic', 0, 0, until_ms
  end
  if not strategy and e.conc then
    local active = redis.call('ZCOUNT', key_rl_active(P, key), '(' .. now, '+inf')
    if active >= e.conc then
      local first = redis.call('ZRANGE', key_rl_active(P, key), '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
      strategy, limit, current, wake = 'concurrency', e.conc, active, first[2] and tonumber(first[2]) or -1
    end
  end
  if not strategy and e.rate_limit and e.rate_period then
    local wk = key_rl_win(P, key)
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', now - e.rate_period)
    local n = redis.call('ZCARD', wk)
    if n >= e.rate_limit then
      local oldest = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
      strategy, limit, current, wake = 'rate', e.rate_limit, n, tonumber(oldest[2]) + e.rate_period
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
-- lasts until `lease`. The window entry is id:claim, unique per start: a give-back of the attempt
-- (requeue, rate_limit_until, dead-letter retry) can never make a later start overwrite this one.
local function rl_take(P, key, e, id, claim, lease, now)
  if e.conc then
    redis.call('ZADD', key_rl_active(P, key), lease, id)
  end
  if e.rate_limit and e.rate_period then
    redis.call('ZADD', key_rl_win(P, key), now, id .. ':' .. claim)
    redis.call('PEXPIRE', key_rl_win(P, key), e.rate_period)
  end
  if e.throttle_limit and e.throttle_period then
    -- Next start at the previous allowed time + interval, so a start that came a little late (waiting
    -- for a FETCH) does not push every later one back; but never closer than 90% of the interval.
    local interval = throttle_interval(e)
    local nxt = math.max(throttle_allowed(P, key, interval) + interval, now + math.floor(interval * 0.9))
    redis.call('SET', key_rl_tat(P, key), nxt .. ' ' .. interval .. ' ' .. now, 'PX', interval + THROTTLE_KEEP_MS)
  end
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
  redis.call('HDEL', key_queue_parked(P, queue), key)
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

-- lane_park(P, queue, key, member, score, wake, strategy): the lane's popped head could not start
-- because of `strategy` (concurrency, rate, throttle, dynamic); keep it (when member is given) with the
-- lane's other jobs, out of the ready set, until `wake` (ms; -1 = until a slot of the key is released).
-- The parked hash holds '<wake> <strategy>', so the lane's release can say what held it.
local function lane_park(P, queue, key, member, score, wake, strategy)
  if member then redis.call('ZADD', key_queue_lane(P, queue, key), score, member) end
  redis.call('HSET', key_queue_parked(P, queue), key, wake .. ' ' .. strategy)
  if wake >= 0 then redis.call('ZADD', key_rl_wake(P), wake, queue .. '\n' .. key) end
end

-- lane_release(P, queue, key, now): re-open a parked lane (a slot came back, its wake time came, or
-- its limits changed) and emit rate_limit.released with the strategy that had held it (seed §11.1:
-- key, strategy, job_id). Returns the new head's id, or nil when the lane had nothing to open.
local function lane_release(P, queue, key, now)
  local held = redis.call('HGET', key_queue_parked(P, queue), key)
  local head = lane_open(P, queue, key)
  if head then
    local strategy = held and string.match(held, '^%S+ (%S+)$') or 'concurrency'
    ev_rate_limit_released(P, head, (base_queue(queue)), '', now, key, strategy)
  end
  return head
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
  local hs = moved_score(P, queue, head, tonumber(redis.call('ZSCORE', rk, head)))
  local bs = moved_score(P, queue, best[1], tonumber(best[2]))
  if bs < hs or (bs == hs and best[1] < head) then
    redis.call('ZREM', rk, head)
    redis.call('ZADD', lk, hs, head)
    redis.call('ZREM', lk, best[1])
    redis.call('ZADD', rk, bs, best[1])
    redis.call('HSET', hk, key, best[1])
  end
end

-- lane_wake_all(P, key): re-open every parked lane of key K (a slot was released or a block ended).
-- Returns the first head it opened (or nil) and how many queues have a lane for K.
local function lane_wake_all(P, key, now)
  local opened = nil
  local queues = redis.call('SMEMBERS', key_rl_queues(P, key))
  for _, queue in ipairs(queues) do
    local head = lane_release(P, queue, key, now)
    if head then
      opened = opened or head
      redis.call('ZREM', key_rl_wake(P), queue .. '\n' .. key)
    end
  end
  redis.call('DEL', key_rl_state(P, key))
  return opened, #queues
end

-- rl_release(P, key, id, now): job id gives back its concurrency slot of key K.
local function rl_release(P, key, id, now)
  if redis.call('ZREM', key_rl_active(P, key), id) == 1 then
    -- A key with a lane that holds jobs is not idle: only a key with none asks.
    local _, lanes = lane_wake_all(P, key, now)
    if lanes == 0 then rl_maybe_idle(P, key) end
  end
end

-- rl_register(P, key, spec, now): a job with policy `spec` was enqueued with key K: K is listed in
-- P..'rl:keys' (and no longer idle), and its policy becomes the key's (newest wins). When the limits change, K's parked lanes re-open so that FETCH judges them
-- by the new limits (a stricter policy re-parks them at the next FETCH).
local function rl_limits_part(spec)
  return spec and (string.match(spec, '^(.*) %S+$') or spec)
end

local function rl_register(P, key, spec, now)
  redis.call('ZADD', key_rl_keys(P), 0, key)
  if redis.call('ZREM', key_rl_idle(P), key) == 1 then
    -- K was idle: its counters and episode stay again (SET below takes the policy's expiry away).
    redis.call('PERSIST', key_rl_stats(P, key))
    redis.call('PERSIST', key_rl_state(P, key))
  end
  local old = redis.call('SET', key_rl_policy(P, key), spec, 'GET')
  if old and rl_limits_part(old) ~= rl_limits_part(spec) then lane_wake_all(P, key, now) end
end
