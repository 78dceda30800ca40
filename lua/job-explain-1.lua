-- job-explain-1.lua: what holds a job back and until when (GET /jobs/{id}/explain), decided by the
-- very functions FETCH decides with, in FETCH's order: the queue (paused, re-scoring, queue-level limits:
-- includes/gates.lua), its tenant's concurrency there, the fair share among its tenants (tenant.lua),
-- then the job's own verdict (includes/verdict.lua Verdict.job, FETCH's claim loop's: its rate-limit key
-- holds it back, or FETCH ends it unrun), then its place.
--
-- KEYS
--   KEYS[1] P..'job:'..id  string the job's record
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string the job
-- RETURNS
--   {'not_found'}                              no such job
--   {'ok', now_ms, record, gate_1, ..., gate_n} record: the job's record (the MessagePack of
--                                              includes/record.lua); one gate per rule that stands
--                                              between the job and a worker now, in FETCH's order
--                                              (none for a job that is not waiting):
--     gate_i = {name, until_ms, ahead, limit, current, key, holders, extra}
--       name     'scheduled' (scheduled or retryable: its run time), 'pending' (a workflow member
--                waiting for its turn), 'paused', 'rescoring', 'queue_concurrency', 'queue_rate',
--                'tenant_concurrency' (its tenant's jobs of the queue fill the tenant's cap there),
--                'fair_share', 'dynamic', 'concurrency', 'pool' (its key is past its floor and the
--                queue's free slots are owed to keys below theirs), 'rate', 'throttle', 'override' (the limit
--                above it is an operator's override), 'order' (jobs before it in its ready set or
--                lane), or what FETCH does instead of running it: 'expired', 'workflow_cancelled',
--                'superseded'
--       until_ms when the gate may open (ms), -1 when unknown (a pause, a workflow step's parents)
--       ahead    eligible jobs before it at that gate (in its ready set, those whose verdict is claim;
--                its lane's rank; for fair_share the tenants before its tenant; for pending the steps
--                or jobs still to end), -1 when none applies
--       limit, current   the limit and its use now (-1 when none); for a batch callback the batch's
--                jobs and how many ended
--       key      the rate-limit key ('' for none)
--       holders  job ids holding the slots (concurrency, queue_concurrency, tenant_concurrency, pool; at most MAX_HOLDERS, the
--                earliest lease deadline first), or the chain step being waited for (pending)
--       extra    flat field/value pairs: fair_share tenant, pass, lowest_pass, tenants, weight;
--                tenant_concurrency tenant;
--                pending workflow_id, workflow_type, workflow_state, step or callback; override the
--                override's fields; superseded reason, by; scheduled state; pool floor, owed; a key
--                gate of a job whose on_limit is drop, or reschedule (with a wake time): on_limit
-- COST   O(log n): a few reads of the job's queue, key and tenant structures; for a tenant's job, up to
--        100 tenants ahead × TURN_PEEK ready jobs' verdicts (startable); up to AHEAD_LOOK jobs before it
--        in its ready set, and for a pool gate up to 100 owing lanes' heads, judged by their verdicts
-- CAPS   holders are at most MAX_HOLDERS = 100 per gate (ZRANGE LIMIT); the fair share looks at the
--        first 100 tenants ahead (tenant.lua TURN_LOOK), and at the first TURN_PEEK = 3 ready jobs of
--        each (startable: their verdicts, FETCH's Verdict.job); before() judges the first AHEAD_LOOK =
--        100 jobs before it, Verdict.owed_now the first 100 lanes owing a pool
-- CLOCK  Redis TIME
-- INVARIANTS
--   reads only job state: its one kind of write is the pruning that FETCH's own checks do on the way
--   (queue_gate's and rl_check's ZREMRANGEBYSCORE of window entries that have already slid out of a
--   queue's or key's sliding window), which changes no answer of any script; nothing else is written
--   (no lane parked, no tenant joined, no event), so explaining a job never changes when it runs. The
--   rules are FETCH's own functions, so an explanation says what FETCH would decide at that instant;
--   RateKey.check stops at a key's first limit reached (as FETCH does), so a limit behind it shows once it
--   lifts. A unique conflict never leaves a job waiting (it is settled at the enqueue: refused,
--   ignored or replaced), and a backpressure bound only refuses enqueues, so neither is a gate.
--@include clock
--@include gates
--@include verdict

local MAX_HOLDERS = 100
local TURN_PEEK = 3
-- Jobs before one in its ready set whose verdicts before() looks at.
local AHEAD_LOOK = 100
local P, id = ARG.P, ARG.id
local jk = key_job(P, id)
local f = rec_map(jk)
if not f then return {'not_found'} end
local now = now_ms()
local out = {'ok', now, rec_packed(jk)}

local function gate(name, until_ms, ahead, limit, current, key, holders, extra)
  out[#out + 1] = {name, until_ms or -1, ahead or -1, limit or -1, current or -1, key or '', holders or {},
    extra or {}}
end

-- The slot holders of a zset scored by lease deadline: those whose lease has not lapsed.
local function holders_of(zk)
  return redis.call('ZRANGE', zk, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, MAX_HOLDERS)
end

local state = f.state
if state == 'scheduled' or state == 'retryable' then
  local at = redis.call('ZSCORE', key_scheduled(P), id) or f.scheduled_at
  gate('scheduled', tonumber(at), nil, nil, nil, nil, nil, {'state', state})
  return out
end

if state == 'pending' then
  local W, slot = f.wf, f.wf_i
  local w = redis.call('HMGET', key_workflow(P, W or ''), 'type', 'state', 'cursor', 'total', 'completed',
    'failed')
  local idx = tonumber(slot)
  local extra = {'workflow_id', W or '', 'workflow_type', w[1] or '', 'workflow_state', w[2] or ''}
  if w[1] == 'chain' and idx then
    -- A chain releases step cursor + 1 when step cursor completes (includes/workflow.lua).
    local cursor = tonumber(w[3]) or 0
    local held_by = redis.call('LINDEX', key_workflow_jobs(P, W), cursor)
    extra[#extra + 1] = 'step'
    extra[#extra + 1] = slot
    gate('pending', nil, idx - cursor, nil, nil, nil, held_by and {held_by} or {}, extra)
  else
    -- A batch callback fires when every job of the batch ended.
    local total = tonumber(w[4]) or 0
    local ended = (tonumber(w[5]) or 0) + (tonumber(w[6]) or 0)
    extra[#extra + 1] = 'callback'
    extra[#extra + 1] = slot or ''
    gate('pending', nil, math.max(total - ended, 0), total, ended, nil, nil, extra)
  end
  return out
end

if state ~= 'available' then return out end

local queue, tenant, key, member = f.queue, f.tenant, f.rl_key, f.member
local q = Tenant.sub_queue(queue, tenant)
local l = Gate.settings(P, queue)

-- claims(sq, m): FETCH, popping member m of the sub-queue sq, would start it: its verdict is 'claim'
-- (includes/verdict.lua, FETCH's own); a member with no usable record is not (FETCH drops it).
local function claims(sq, m)
  local mid = member_id(m)
  local g = rec_load(key_job(P, mid)).f
  return g and Verdict.job(P, mid, g, sq, l, now) == 'claim'
end

-- before(sq, rank): of the `rank` jobs before one in sq's ready set, those FETCH would start: it passes
-- the others by in the same call (parks their lanes, ends them unrun). The first AHEAD_LOOK are judged;
-- any past them count.
local function before(sq, rank)
  if not rank or rank == 0 then return rank end
  local n = math.max(rank - AHEAD_LOOK, 0)
  for _, m in ipairs(redis.call('ZRANGE', key_queue_ready(P, sq), 0, math.min(rank, AHEAD_LOOK) - 1)) do
    if claims(sq, m) then n = n + 1 end
  end
  return n
end
-- Where it waits (ratelimit.lua): its (sub-)queue's ready set, or, for a job with a rate-limit key that
-- is not its lane's open head, the lane.
local ahead_ready, ahead_lane = nil, nil
if member then
  local head = key and redis.call('HGET', key_queue_heads(P, q), key)
  if key and head ~= member then
    local r = redis.call('ZRANK', key_queue_lane(P, q, key), member)
    if r then ahead_lane = r + (head and 1 or 0) end
  else
    ahead_ready = before(q, redis.call('ZRANK', key_queue_ready(P, q), member) or nil)
    if key then ahead_lane = 0 end
  end
end

-- The queue: FETCH skips a paused queue, one being re-scored, one whose queue-level limit is reached.
if Gate.paused(P, queue) then gate('paused', nil, ahead_ready) end
local qg, qlimit, qcurrent, qwake = Gate.queue(P, queue, l, now, true)
if qg then
  local holders = qg == 'queue_concurrency' and holders_of(key_queue_rl_active(P, queue)) or nil
  gate(qg, qwake >= 0 and qwake or nil, ahead_ready, qlimit >= 0 and qlimit or nil,
    qcurrent >= 0 and qcurrent or nil, nil, holders)
end

-- The tenant's concurrency in the queue: FETCH passes a tenant at its cap by (includes/tenant.lua).
if tenant then
  local tg, tlimit, tcurrent, twake = Gate.tenant(P, queue, tenant, l, now, true)
  if tg then
    gate(tg, twake >= 0 and twake or nil, ahead_ready, tlimit, tcurrent, nil, holders_of(key_queue_rl_active(P, q)),
      {'tenant', tenant})
  end
end

-- startable(sq): whether FETCH, serving the sub-queue sq, would start a job there: its tenant is under
-- its concurrency in the queue (FETCH parks a tenant at its cap and serves the next), and one of its first
-- TURN_PEEK ready jobs gets the verdict 'claim'; a ready set longer than that counts as startable (FETCH
-- may yet find one further on).
local function startable(sq)
  local _, t = Tenant.base_queue(sq)
  if t and Gate.tenant(P, queue, t, l, now) then return false end
  local ready = redis.call('ZRANGE', key_queue_ready(P, sq), 0, TURN_PEEK)
  if #ready > TURN_PEEK then return true end
  for _, m in ipairs(ready) do
    if claims(sq, m) then return true end
  end
  return false
end

-- The fair share among the queue's tenants: FETCH serves the tenant Tenant.next names.
if l.tenants and ahead_ready then
  local t = tenant or ''
  local rank, pass, lowest, n = Tenant.turn(P, queue, t, startable)
  if rank and rank > 0 then
    gate('fair_share', nil, rank, nil, nil, nil, nil, {'tenant', t, 'pass', tostring(pass), 'lowest_pass',
      tostring(lowest), 'tenants', n, 'weight', tostring(Tenant.queue_weight(l.tenancy, t) or Tenant.weight_read(P, t))})
  end
end

-- The job itself, as FETCH judges it when it pops it: the one verdict both decide by
-- (includes/verdict.lua). A key that holds it back is named with its limit, and its override if the limit
-- is one.
local kind, e, a, limit, current, wake = Verdict.job(P, id, f, q, l, now)
if kind == 'held' and a == 'pool' then
  -- The floors owed in the pool by keys whose next job FETCH would not start now: FETCH meets that job
  -- in the same call, and the key's part drops (includes/verdict.lua Verdict.owed_now).
  local owed = Verdict.owed_now(P, e, now)
  if owed < e.pool_want then
    e.pool_want = owed
    local s2, l2, c2, w2 = RateKey.check(P, key, e, now)
    if s2 then a, limit, current, wake = s2, l2, c2, w2 else kind = 'claim' end
  end
end
local limited = kind == 'held'
if limited then
  local strategy = a
  local holders = strategy == 'concurrency' and holders_of(key_rl_active(P, key)) or nil
  local extra = nil
  if strategy == 'pool' then
    holders = holders_of(key_queue_rl_active(P, e.pool_queue))
    extra = {'floor', tostring(e.floor), 'owed', tostring(e.pool_want)}
    -- The pool is the tenant's concurrency in the queue, not the queue's (rl_pool.lua Pool.pick).
    if e.pool_queue ~= queue then
      extra[#extra + 1] = 'tenant'
      extra[#extra + 1] = tenant
    end
  end
  -- What its on_limit has FETCH do instead of leaving it waiting in its lane.
  if e.on_limit == 'drop' or (e.on_limit == 'reschedule' and wake > now) then
    extra = extra or {}
    extra[#extra + 1] = 'on_limit'
    extra[#extra + 1] = e.on_limit
  end
  gate(strategy, wake >= 0 and wake or nil, ahead_lane, limit, current, key, holders, extra)
  if Policy.overridden(e, strategy) then
    local ttl = redis.call('PTTL', key_rl_ovr(P, key))
    gate('override', ttl >= 0 and now + ttl or nil, ahead_lane, limit, current, key, nil,
      redis.call('HGETALL', key_rl_ovr(P, key)))
  end
end

-- Its place: jobs before it in its ready set (priority, then FIFO) or in its lane.
if ahead_ready and ahead_ready > 0 then
  gate('order', nil, ahead_ready)
elseif not limited and ahead_lane and ahead_lane > 0 then
  gate('order', nil, ahead_lane, nil, nil, key)
end

-- What FETCH does instead of running it when it pops it (fetch-1.lua claim_from, by the same verdict).
if kind == 'expired' or kind == 'workflow_cancelled' then
  gate(kind, nil, nil)
elseif kind == 'superseded' then
  gate('superseded', nil, nil, nil, nil, nil, nil, {'reason', a.reason, 'by', a.by or ''})
end
return out
