-- Lanes: where a rate-limit key's available jobs wait (how the pieces fit: includes/ratelimit.lua).
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
-- Idle keys. A key whose lanes are all empty and which has no slot holder is idle: its policy, episode
-- and counters expire RL_IDLE_MS later (Lane.maybe_idle), unless a job of the key is enqueued first
-- (RateKey.register takes them back), and the timer drops it from P..'rl:keys' once they have
-- (promote-1.lua, from P..'rl:idle': key -> when it may go). Its window, throttle and dynamic block
-- already expire on their own; an operator override keeps its own expiry.
-- CAPS: the parked lanes of a key a call re-opens (Lane.wake: at most LANE_WAKE_MAX = 10); a key's
-- queues (Lane.waiting: at most the queues there are).
--@include rl_pool
--@include emit
--@include clock
--@include score

-- Parked lanes of one key one call re-opens (Lane.wake).
local LANE_WAKE_MAX = 10

-- Lane.maybe_idle(P, key): when K has no lane holding jobs and no slot holder, its per-key state starts
-- to expire (see "Idle keys" above). O(1).
function Lane.maybe_idle(P, key)
  if redis.call('EXISTS', key_rl_queues(P, key), key_rl_active(P, key)) > 0 then return end
  for _, k in ipairs({key_rl_policy(P, key), key_rl_state(P, key), key_rl_stats(P, key)}) do
    redis.call('PEXPIRE', k, RL_IDLE_MS)
  end
  redis.call('ZADD', key_rl_idle(P), now_ms() + RL_IDLE_MS, key)
end

-- Lane.waiting(P, key): available jobs of K, in its lanes and as their heads, across its queues.
function Lane.waiting(P, key)
  local waiting = 0
  for _, queue in ipairs(redis.call('SMEMBERS', key_rl_queues(P, key))) do
    waiting = waiting + redis.call('ZCARD', key_queue_lane(P, queue, key))
      + redis.call('HEXISTS', key_queue_heads(P, queue), key)
  end
  return waiting
end

-- Lane.open(P, queue, key, settled): move the lane's best job into the ready set, if it has none there.
-- Returns the head's job id, or nil when the lane is empty or already open. `settled`: the caller knows
-- the queue is not being re-scored (FETCH serves no such queue), so the moved job keeps its score
-- without asking (moved_score's HEXISTS, one command per claim of a rate-limited job).
function Lane.open(P, queue, key, settled)
  local hk = key_queue_heads(P, queue)
  if redis.call('HEXISTS', hk, key) == 1 then return nil end
  if redis.call('HDEL', key_queue_parked(P, queue), key) == 1 then
    redis.call('ZREM', key_rl_parked(P, key), queue)
  end
  local best = redis.call('ZPOPMIN', key_queue_lane(P, queue, key))
  if #best == 0 then
    -- The lane is empty (its last job was claimed, ended or moved): the queue no longer has one for K.
    redis.call('SREM', key_rl_queues(P, key), queue)
    Lane.maybe_idle(P, key)
    return nil
  end
  local score = tonumber(best[2])
  if not settled then score = moved_score(P, queue, best[1], score) end
  Tenant.ready_put(P, queue, score, best[1])
  redis.call('HSET', hk, key, best[1])
  return string.sub(best[1], -36)
end

-- Lane.park(P, queue, key, member, score, wake, strategy, floor, pool, now): the lane's popped head could
-- not start because of `strategy` (concurrency, rate, throttle, dynamic, pool); keep it (when member is
-- given) with the lane's other jobs, out of the ready set, until `wake` (ms; -1 = until a slot of the
-- key is released). The parked hash holds '<wake> <strategy>[ f<floor>]', so the lane's release can
-- say what held it and, for a key with a floor in a pool (see "Burstable concurrency"), what it owes
-- once open again. A lane its pool (named `pool`) holds back also waits in the pool's FIFO
-- P..'q:'..pool..':pool:wait'. Every parked lane of K is listed in P..'rl:'..K..':parked' by when it
-- parked (last), which a release wakes in that order, a few at a time (Lane.wake).
function Lane.park(P, queue, key, member, score, wake, strategy, floor, pool, now)
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

-- Lane.release(P, queue, key, now): re-open a parked lane (a slot came back, its wake time came, or
-- its limits changed) and emit rate_limit.released with the strategy that had held it (seed §11.1:
-- key, strategy, job_id). Returns the new head's id, or nil when the lane had nothing to open.
function Lane.release(P, queue, key, now)
  local held = redis.call('HGET', key_queue_parked(P, queue), key)
  local head = Lane.open(P, queue, key)
  if head then
    local strategy = held and string.match(held, '^%S+ (%S+)') or 'concurrency'
    ev_rate_limit_released(P, head, (Tenant.base_queue(queue)), '', now, key, strategy)
  end
  -- A lane of a key with a floor owes it again once open, and nothing once empty (the floor as it is
  -- now: the mark only says the key had one when its lane parked).
  if held and string.find(held, ' f%d+$') then
    local pol = Policy.of(P, key, nil)
    local floor, pool = nil, nil
    if pol then floor, pool = Pool.floor_of(P, queue, Policy.effective(P, key, pol)) end
    Pool.sync(P, queue, key, floor or 0, now, nil, floor and 0 or nil, pool)
  end
  return head
end

-- Lane.add(P, queue, key, score, member): a job of key K became available in queue Q.
function Lane.add(P, queue, key, score, member)
  redis.call('ZADD', key_queue_lane(P, queue, key), score, member)
  redis.call('SADD', key_rl_queues(P, key), queue)
  if redis.call('HEXISTS', key_queue_parked(P, queue), key) == 1 then return end
  if redis.call('HEXISTS', key_queue_heads(P, queue), key) == 1 then
    return 'rebalance'
  end
  Lane.open(P, queue, key)
end

-- Lane.rebalance(P, queue, key): keep an open lane's head its best job (after an enqueue, a PATCH, or
-- the re-scoring of the lane when the queue's aging changed).
function Lane.rebalance(P, queue, key)
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
    Lane.open(P, queue, key)
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

-- Lane.wake(P, key, now, upto): re-open the parked lanes of key K that parked first, LANE_WAKE_MAX at
-- most, and only those that parked at `upto` or before (ms; nil: any); FETCH parks again those still
-- held. Bounded work whatever the number of lanes (issue 37 item 10: one release re-opened every lane,
-- O(tenants) per job with 10,000 tenants on one key). Returns the first head it opened (or nil) and
-- whether parked lanes it could not take remain.
function Lane.wake(P, key, now, upto)
  local pk = key_rl_parked(P, key)
  local lanes = redis.call('ZRANGE', pk, '-inf', upto or '+inf', 'BYSCORE', 'LIMIT', 0, LANE_WAKE_MAX + 1)
  local more = #lanes > LANE_WAKE_MAX
  local opened = nil
  for i = 1, math.min(#lanes, LANE_WAKE_MAX) do
    local queue = lanes[i]
    local head = Lane.release(P, queue, key, now)
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

-- Lane.wake_all(P, key, now): K's limits changed (its policy, an override, an adaptive step, units
-- given back): every lane parked until now is to be judged again. Lane.wake takes the first; the promote
-- timer the rest (P..'rl:rewake': key -> when its limits changed; promote-1.lua), a few per tick.
function Lane.wake_all(P, key, now)
  local opened, more = Lane.wake(P, key, now, now)
  if more then redis.call('ZADD', key_rl_rewake(P), now, key) end
  return opened
end
