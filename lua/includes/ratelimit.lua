-- Rate limits (seed: ojs-rate-limiting-spec.md), enforced inside FETCH without scanning limited work.
--
-- Lanes. An available job with a rate-limit key K in queue Q is not put straight into Q's ready set.
-- Each (Q, K) is a lane: the sorted set P..'q:'..Q..':lane:'..K holds the lane's jobs (same score and
-- member as a ready set), and at most one of them, the lane's head, sits in Q's ready set; the hash
-- P..'q:'..Q..':heads' maps K to the head's member. A lane is OPEN when its head is in the ready set,
-- PARKED when K is limited: then all its jobs wait in the lane set and none is in the ready set, so FETCH
-- never meets them. Parking costs one pop per lane per blocking episode, however many jobs the lane
-- holds; FETCH never scans the limited backlog.
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
-- P..'rl:'..K..':queues' the queues that have a lane for K; P..'rl:keys' every key (lexicographic).
--
-- A job's policy is its 'rl' field: "<concurrency> <rate_limit> <rate_period_ms> <throttle_limit>
-- <throttle_period_ms> <on_limit>", '-' for an absent limit.
--@include emit

local function rl_parse(spec)
  if not spec then return nil end
  local c, rl, rp, tl, tp, on = string.match(spec, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  return { conc = tonumber(c), rate_limit = tonumber(rl), rate_period = tonumber(rp),
    throttle_limit = tonumber(tl), throttle_period = tonumber(tp), on_limit = on }
end

-- The limits in force for key K: the operator's override, field by field, over the job's own policy.
local function rl_effective(P, key, pol)
  local o = redis.call('HMGET', P .. 'rl:' .. key .. ':ovr', 'concurrency', 'rate_limit', 'rate_period',
    'throttle_limit', 'throttle_period')
  local e = { conc = pol.conc, rate_limit = pol.rate_limit, rate_period = pol.rate_period,
    throttle_limit = pol.throttle_limit, throttle_period = pol.throttle_period, on_limit = pol.on_limit }
  if o[1] then e.conc = tonumber(o[1]) end
  if o[2] then e.rate_limit, e.rate_period = tonumber(o[2]), tonumber(o[3]) end
  if o[4] then e.throttle_limit, e.throttle_period = tonumber(o[4]), tonumber(o[5]) end
  return e
end

-- rl_check: may one more job of key K start now under limits e?
-- Returns nil when it may; else strategy, limit, current, wake_at (ms, or -1 for "when released").
local function rl_check(P, key, e, now)
  local base = P .. 'rl:' .. key
  local until_ms = tonumber(redis.call('GET', base .. ':until') or '0')
  if until_ms > now then return 'dynamic', 0, 0, until_ms end
  if e.conc then
    local active = redis.call('ZCOUNT', base .. ':active', '(' .. now, '+inf')
    if active >= e.conc then
      local first = redis.call('ZRANGE', base .. ':active', '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
      local wake = -1
      if first[2] then wake = tonumber(first[2]) end
      local ovr_ttl = redis.call('PTTL', base .. ':ovr')
      if ovr_ttl > 0 and (wake < 0 or now + ovr_ttl < wake) then wake = now + ovr_ttl end
      return 'concurrency', e.conc, active, wake
    end
  end
  if e.rate_limit and e.rate_period then
    local wk = base .. ':win'
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', now - e.rate_period)
    local n = redis.call('ZCARD', wk)
    if n >= e.rate_limit then
      local oldest = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
      return 'rate', e.rate_limit, n, tonumber(oldest[2]) + e.rate_period
    end
  end
  if e.throttle_limit and e.throttle_period then
    local tat = tonumber(redis.call('GET', base .. ':tat') or '0')
    if tat > now then return 'throttle', e.throttle_limit, 1, tat end
  end
  return nil
end

-- rl_take: job id starts under key K with limits e; its slot lasts until `lease`.
local function rl_take(P, key, e, id, attempt, lease, now)
  local base = P .. 'rl:' .. key
  if e.conc then
    redis.call('ZADD', base .. ':active', lease, id)
  end
  if e.rate_limit and e.rate_period then
    redis.call('ZADD', base .. ':win', now, id .. ':' .. attempt)
    redis.call('PEXPIRE', base .. ':win', e.rate_period)
  end
  if e.throttle_limit and e.throttle_period then
    -- Next start at the previous allowed time + interval, so a start that came a little late (waiting
    -- for a FETCH) does not push every later one back; but never closer than 90% of the interval.
    local interval = math.floor(e.throttle_period / e.throttle_limit)
    local tat = tonumber(redis.call('GET', base .. ':tat') or '0')
    local nxt = math.max(tat + interval, now + math.floor(interval * 0.9))
    redis.call('SET', base .. ':tat', nxt, 'PX', interval + 1000)
  end
end

-- lane helpers -------------------------------------------------------------------------------------
local function lane_key(P, queue, key) return P .. 'q:' .. queue .. ':lane:' .. key end

-- lane_open(P, queue, key): move the lane's best job into the ready set, if it has none there.
-- Returns the head's job id, or nil when the lane is empty or already open.
local function lane_open(P, queue, key)
  local hk = P .. 'q:' .. queue .. ':heads'
  if redis.call('HEXISTS', hk, key) == 1 then return nil end
  redis.call('HDEL', P .. 'q:' .. queue .. ':parked', key)
  local best = redis.call('ZPOPMIN', lane_key(P, queue, key))
  if #best == 0 then return nil end
  redis.call('ZADD', P .. 'q:' .. queue .. ':ready', best[2], best[1])
  redis.call('HSET', hk, key, best[1])
  redis.call('SADD', P .. 'ready', queue)
  return string.sub(best[1], -36)
end

-- lane_park(P, queue, key, member, score, wake): the lane's popped head could not start; keep it (when
-- member is given) with the lane's other jobs, out of the ready set, until `wake` (ms; -1 = until a slot
-- of the key is released).
local function lane_park(P, queue, key, member, score, wake)
  if member then redis.call('ZADD', lane_key(P, queue, key), score, member) end
  redis.call('HSET', P .. 'q:' .. queue .. ':parked', key, wake)
  if wake >= 0 then redis.call('ZADD', P .. 'rl:wake', wake, queue .. '\n' .. key) end
end

-- lane_add(P, queue, key, score, member): a job of key K became available in queue Q.
local function lane_add(P, queue, key, score, member)
  redis.call('ZADD', lane_key(P, queue, key), score, member)
  redis.call('SADD', P .. 'rl:' .. key .. ':queues', queue)
  if redis.call('HEXISTS', P .. 'q:' .. queue .. ':parked', key) == 1 then return end
  if redis.call('HEXISTS', P .. 'q:' .. queue .. ':heads', key) == 1 then
    return 'rebalance'
  end
  lane_open(P, queue, key)
end

-- lane_rebalance(P, queue, key): keep an open lane's head its best job (after an enqueue or a PATCH).
local function lane_rebalance(P, queue, key)
  local hk = P .. 'q:' .. queue .. ':heads'
  local head = redis.call('HGET', hk, key)
  if not head then return end
  local lk = lane_key(P, queue, key)
  local best = redis.call('ZRANGE', lk, 0, 0, 'WITHSCORES')
  if #best == 0 then return end
  local rk = P .. 'q:' .. queue .. ':ready'
  local hs = tonumber(redis.call('ZSCORE', rk, head))
  local bs = tonumber(best[2])
  if bs < hs or (bs == hs and best[1] < head) then
    redis.call('ZREM', rk, head)
    redis.call('ZADD', lk, hs, head)
    redis.call('ZREM', lk, best[1])
    redis.call('ZADD', rk, bs, best[1])
    redis.call('HSET', hk, key, best[1])
  end
end

-- lane_wake_all(P, key): re-open every parked lane of key K (a slot was released or a block ended).
local function lane_wake_all(P, key, now)
  local opened = nil
  for _, queue in ipairs(redis.call('SMEMBERS', P .. 'rl:' .. key .. ':queues')) do
    local head = lane_open(P, queue, key)
    if head then
      opened = opened or head
      redis.call('ZREM', P .. 'rl:wake', queue .. '\n' .. key)
      emit(P, 'rate_limit.released', head, queue, '', now, '{"key":"' .. key .. '"}')
    end
  end
  redis.call('DEL', P .. 'rl:' .. key .. ':state')
  return opened
end

-- rl_release(P, key, id, now): job id gives back its concurrency slot of key K.
local function rl_release(P, key, id, now)
  if redis.call('ZREM', P .. 'rl:' .. key .. ':active', id) == 1 then
    lane_wake_all(P, key, now)
  end
end
