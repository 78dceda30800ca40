-- Ready sets: P..'q:'..queue..':ready' is a sorted set whose score orders the queue (lower runs first)
-- and whose member is <sequence><job id>. Equal scores sort by member bytes, so the sequence gives FIFO
-- within a score. The sequence is two counters in the hash P..'seq': 'lo' counts to SEQ_LO_LIMIT (exact
-- in a Lua double), then carries into 'hi'. The member spells hi with a one-digit length prefix and lo
-- with 15 fixed digits, so byte order is numeric order across the carry: FIFO never wraps.
--
-- The score is the job's rank, or with aging rank * aging_s + ready_since_s (includes/score.lua).
--
-- P..'ready' is the set of queues that hold at least one ready job (MediaWiki's ready-queue aggregator).
-- P..'q:'..queue..':pri' counts ready jobs per priority (as the client gave it), for priority-stats.
--
-- A job with a tenant waits in its tenant's sub-queue of its queue instead (includes/tenant.lua): its
-- ready set and lanes are the sub-queue's; its counts and settings stay its queue's.
--@include score
--@include ratelimit
--@include counters
local SEQ_LO_LIMIT = 1000000000000000

local function seq_member(hi, lo, id)
  local hs = string.format('%d', hi)
  return string.len(hs) .. hs .. string.format('%015d', lo) .. id
end

-- seq_take(P, n): reserves n sequence numbers: the hash's new lo, and its hi. A sequence something other
-- than this library left as no integer cannot fail the transition that needs it (issue 40): a new epoch
-- starts (hi + 1, or 0 when hi is no integer either), logged; jobs keep their order within it.
local function seq_take(P, n)
  local seq = key_seq(P)
  local lo = redis.pcall('HINCRBY', seq, 'lo', n)
  local hi = redis.call('HGET', seq, 'hi')
  if type(lo) ~= 'number' then
    redis.log(redis.LOG_WARNING, 'ojs: sequence ' .. seq .. ' is not an integer; a new epoch starts')
    hi = string.find(hi or '', '^%d+$') and tonumber(hi) + 1 or 0
    lo = n
    redis.call('HSET', seq, 'hi', hi, 'lo', lo)
  end
  return lo, tonumber(hi or '0') or 0
end

local function next_member(P, id)
  local lo, hi = seq_take(P, 1)
  if lo >= SEQ_LO_LIMIT then
    local seq = key_seq(P)
    hi = hi + 1
    redis.call('HSET', seq, 'hi', hi, 'lo', 0)
    lo = 0
  end
  return seq_member(hi, lo, id)
end

-- seq_block(P, n): reserves n consecutive sequence numbers in one call for a batch; returns hi and the
-- first lo, or nil when the block would reach the carry (the caller then takes next_member per job,
-- which carries). seq_member(hi, lo, id) spells the member exactly as next_member does.
local function seq_block(P, n)
  local lo, hi = seq_take(P, n)
  if lo >= SEQ_LO_LIMIT then
    redis.call('HINCRBY', key_seq(P), 'lo', -n)
    return nil
  end
  return hi, lo - n + 1
end

-- make_ready(P, jk, id, queue, rank, priority, since_ms, rl_key): make a job available with a fresh
-- FIFO sequence: into its queue's ready set, or into its rate-limit lane when it has a key (see
-- ratelimit.lua; a key with a floor then owes it in its queue's pool, "Burstable concurrency"). The caller sets 'state'. since_ms is when the job (last) became ready to run. member
-- is nil (take the next sequence) or one from seq_block.
local function make_ready(P, jk, id, queue, rank, priority, since_ms, rl_key, member)
  if not (rank and since_ms) then
    -- A record that holds no rank (or time) to wait by: set aside, never a score that is not a number.
    rec_quarantine(P, id, 'rank is not a number', 0)
    return
  end
  member = member or next_member(P, id)
  local score = ready_score(P, queue, rank, since_ms)
  rec('HSET', jk, 'member', member)
  count(key_queue_pri(P, queue), priority, 1, true)
  -- The tenant is read from the record this call already holds (no Redis command).
  local tenant = rec('HGET', jk, 'tenant')
  local q = Tenant.sub_queue(queue, tenant)
  if tenant then redis.call('SADD', key_queue_subs(P, queue), tenant) end
  if rl_key then
    if Lane.add(P, q, rl_key, score, member) == 'rebalance' then Lane.rebalance(P, q, rl_key) end
    -- A key with a floor owes it once its lane is open (ratelimit.lua, "Burstable concurrency").
    local floor, pool = Pool.floor(P, q, rl_key, rec('HGET', jk, 'rl'))
    if floor then Pool.sync(P, q, rl_key, floor, now_ms(), nil, 0, pool) end
    return
  end
  Tenant.ready_put(P, q, score, member)
end

-- not_available(P, queue, priority): a job stopped being available (claimed, cancelled, dropped…).
local function not_available(P, queue, priority)
  count(key_queue_pri(P, queue), priority, -1, true)
end

-- ready_index_check(P, queue): keep P..'ready' exact after taking from a ready set: a queue stays
-- while its own ready set or its fair share (some tenant's) holds anything.
local function ready_index_check(P, queue)
  if redis.call('ZCARD', key_queue_ready(P, queue)) == 0
    and redis.call('EXISTS', key_queue_tenants(P, queue)) == 0 then
    redis.call('SREM', key_ready_index(P), queue)
  end
end

-- unready(P, jk, queue): take an available job out of wherever it waits (cancel).
local function unready(P, jk, queue)
  local f = rec('HMGET', jk, 'member', 'priority', 'rl_key', 'tenant', 'rl')
  if not f[1] then return end
  local member, key = f[1], f[3]
  local q = Tenant.sub_queue(queue, f[4])
  if key and redis.call('HGET', key_queue_heads(P, q), key) ~= member then
    local lk = key_queue_lane(P, q, key)
    redis.call('ZREM', lk, member)
    -- The last job of a lane with no head (a parked lane) left: the lane is empty, no longer parked
    -- (nothing would wake a lane parked until a release of a key that holds no slot), and the key may
    -- be idle (Lane.open does both); a floor it owed there is owed no more.
    if redis.call('EXISTS', lk) == 0 and redis.call('HEXISTS', key_queue_heads(P, q), key) == 0 then
      Lane.open(P, q, key)
      local floor, pool = Pool.floor(P, q, key, f[5])
      if floor then Pool.sync(P, q, key, floor, now_ms(), nil, 0, pool) end
    end
  else
    redis.call('ZREM', key_queue_ready(P, q), member)
    if key then
      redis.call('HDEL', key_queue_heads(P, q), key)
      Lane.open(P, q, key)
      local floor, pool = Pool.floor(P, q, key, f[5])
      if floor then Pool.sync(P, q, key, floor, now_ms(), nil, 0, pool) end
    end
    ready_index_check(P, queue)
  end
  -- A tenant out of the fair share (its jobs wait in parked lanes) may have nothing waiting now.
  if q ~= queue then Tenant.sub_check(P, queue, f[4]) end
  rec('HDEL', jk, 'member')
  not_available(P, queue, f[2])
end
