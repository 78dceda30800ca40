-- fetch-1.lua: the workers' group commit. One call serves many requests of one API node, in order:
-- each request may acknowledge one active job (ACK) and/or claim up to `count` ready jobs for one worker
-- (FETCH) from several queues, strict or weighted; an ACK that also claims is ack-and-fetch-next.
--
-- KEYS
--   KEYS[1] P..'active'   zset   active job ids scored by lease deadline (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (see enqueue-1.lua)
--   ARGV[2] retention_ms  ms    how long an ended (acked, discarded) job's record is kept; 0 = forever
--   ARGV[3..] the requests, one after another: each a REQ record, then its nqueues QUEUE records
--   record REQ
--     +0  worker_id     string recorded on claimed jobs ('' when the worker gave none)
--     +1  count         int(0..10000) most jobs to claim (0: an ACK that claims nothing)
--     +2  visibility_ms int(1..315360000000) lease length for claimed jobs that set no visibility_timeout_ms
--     +3  strategy      'strict'|'weighted' strict: queues in the order given, each drained before
--                       the next; weighted: smooth weighted round-robin over the queues that have
--                       ready jobs
--     +4  wrr_key       string weighted only: suffix of the hash P..'wrr:'..wrr_key holding the
--                              round-robin state shared by every node for this set of weights
--     +5  ack_id        string acknowledge this active job first ('' = no ACK); nothing is claimed
--                              for this request when the ACK is refused
--     +6  ack_result    string the ACK's JSON result, or '' for none
--     +7  ack_lease     string the claim the ACK acts for: lease id, attempt, worker id ('' = not
--     +8  ack_attempt   int?   named; see includes/lease.lua): an ACK for a claim the job no longer
--     +9  ack_worker    string   holds is refused ('lease_lost')
--     +10 nqueues       int(0..1000) how many QUEUE records follow
--     +11 tenant        string the tenant the request acts as ('' = none): it claims only this tenant's
--                              jobs ('' = every tenant's, by fair share: includes/tenant.lua), and its
--                              ACK of another tenant's job is 'not_found' (includes/ack.lua)
--     +12 ack_used      int(0..1000000000)? the ACK's cost_used: the units the job really used ('' = its cost); its
--                              rate-limit window entry counts that instead (ratelimit.lua RateKey.used)
--   record QUEUE
--     +0  name          string the queue
--     +1  weight        int(0..1000) ignored by strict; > 0 for weighted
-- RETURNS
--   {'ok', now_ms, reply_1, ..., reply_n}   one reply per request, in order; reply_i is
--                                            {ack, cut, job_1, ..., job_k}: k <= count; cut is 1 when the
--                                            request stopped on the call's MAX_SKIPS budget before it had
--                                            claimed count jobs (more may be claimable: call again), else
--                                            0; job_i is the claimed job's record as stored after
--                                            the claim (the MessagePack of includes/record.lua), or
--                                            {record, parent_results} for a workflow job with parents
--                                            (includes/workflow.lua wf_job_reply), or {record,
--                                            parent_results or false, checkpoint} for a job with a
--                                            checkpoint (includes/checkpoint.lua); ack is '' (no ACK asked) or ack_job's reply
--                                            (see includes/ack.lua); when that reply is not 'ok', k = 0.
--                                            A refused request changes nothing and does not affect the
--                                            others.
-- COST   per request as if it ran alone; the call's fixed costs (one round trip, TIME) and its reads of
--        each queue's state (ready index, paused flag, settings) are shared by its requests.
--        O(log n) per claimed job (ZPOPMIN); empty queues are skipped with one SMISMEMBER on the
--        ready-queue index P..'ready' for those of a request's queues the call has not seen there yet
--        (a SISMEMBER for a one-queue strict request, none once seen; kept exact with one ZCARD per
--        queue claimed from and call, not per job); weighted adds O(queues) per claimed job. Each
--        feature costs only the jobs that use it, as its include says under "Costs per FETCH": a
--        rate-limited key (includes/ratelimit.lua, and its pieces: costs, adaptive, floors), a queue's
--        tenants (includes/tenant.lua), options.dedup or options.root_job (includes/supersede.lua: one
--        GET when popped, one SET when claimed), a workflow job (includes/workflow.lua: one HMGET of its
--        parents' results per 1000 of them at its claim); the end's ready-index check adds an EXISTS of
--        the fair-share set for a queue whose own ready set is empty, with or without tenants
-- CAPS   requests per call: the server's coalescer sends at most 256; claims per request: its count
--        (at most --max-fetch); queues per request: its nqueues (the request's own list); jobs popped
--        without being claimed (expired, dropped by on_limit, rescheduled, completed as superseded, or
--        put back in a lane that gets parked), and tenants of a queue's fair share found with nothing
--        ready or at their concurrency (each leaves the share; includes/tenant.lua): at most MAX_SKIPS = 100 per call, shared by its
--        requests: a request that meets the budget stops with cut = 1 and the server calls again, so
--        20,000 keys at concurrency 0 cost 200 short calls, never one long one; the ready-index check
--        at the end visits the distinct queues claimed from (at most the requests' queue lists); a
--        key's check looks at most at RL_PRUNE_MAX expired window entries and lapsed holders of a key
--        whose jobs carry costs (includes/ratelimit.lua); a claim of a key with a floor syncs its lanes
--        (at most the queues there are); a pool re-opens at most POOL_WAKE_MAX lanes at once
-- CLOCK  Redis TIME
-- INVARIANTS
--   requests are served one after another exactly as separate calls in that order would be: the group
--   commit changes what a call costs, not what any request sees; a queue that holds tenants' jobs is
--   served by fair share among its tenants, priority and FIFO first inside each (includes/tenant.lua),
--   and never has more of a tenant's jobs active than the tenant's concurrency in it (its slots are
--   checked and taken in the claim's script),
--   and a request naming a tenant claims only that tenant's jobs; a claimed job leaves its ready set and enters P..'active' in the same script, so two fetchers can
--   never claim one job; attempt is incremented at claim, and so is 'claims', the lease id, which
--   nothing ever gives back (includes/lease.lua); the lease length chosen is kept in 'lease_ms' for
--   heartbeats; a key's limits are its registry policy (the newest job's, see ratelimit.lua) under
--   any override, and on_limit is the job's own; a job whose expires_at has passed is discarded
--   instead of claimed (event job.expired); a job whose rate-limit key (or queue limit) is reached
--   is never claimed: per its on_limit it waits in its parked lane (state stays available), is
--   rescheduled (scheduled, at the time the limit should allow it) or dropped (discarded,
--   rate_limit.dropped); the limit check and the slot/window/throttle update are in the same script
--   as the claim, so no limit can be exceeded by racing fetchers; a queue in P..'paused' is skipped,
--   and so is a queue whose waiting jobs are being re-scored for an aging change (its conf holds
--   rs_phase: includes/rescore.lua); a member of a cancelled workflow that a sweep has not reached yet
--   is cancelled when popped, never claimed (includes/workflow.lua); a queue leaves
--   P..'ready' in the same script that takes its last ready job. Weighted: no queue with ready jobs
--   and weight > 0 starves (includes/wrr.lua). A workflow job's first claim stamps its workflow's
--   started_at; a workflow job discarded here advances its workflow (includes/workflow.lua) in this
--   script. A superseded job (includes/supersede.lua) is never handed out: it completes (field
--   superseded, event job.superseded) in this script, within MAX_SKIPS; a claimed job with
--   options.dedup, or a root job, records its start here, atomically with the claim. Every popped
--   job's fate is its verdict (includes/verdict.lua), the one explain reports.
--@include clock
--@include emit
--@include ready
--@include active
--@include ack
--@include supersede
--@include errors
--@include gates
--@include verdict
--@include unclaimed
--@include wrr

--@include checkpoint
local MAX_SKIPS = 100
local P = ARG.P
local retention = tonumber(ARG.retention_ms)
local now = now_ms()
local now_text = text(now)
-- The request being served: its worker, lease length and reply (set by serve()).
local worker, default_vt, reply
-- The request's tenant ('' = none named).
local req_tenant = ''

-- Queue-level limits (PUT /admin/queues/{q}/rate-limit), checked before taking anything from a queue.
local qlimits = {}
-- Paused queues (P..'paused'), read once per call and queue.
local paused = {}
-- Queues this call saw in the ready-queue index P..'ready' and has not found empty since (claim_one
-- forgets a queue whose pop finds nothing): a later request of the call asks the index only about the
-- others. Only what was seen there is kept, so a queue that a lane opened meanwhile (ratelimit.lua adds
-- it to the index) is asked about again, as a separate call would.
local ready_seen = {}

-- queue_live(queue): it has ready jobs by the index and is not paused (each read once per call).
local function queue_live(queue)
  if not ready_seen[queue] then
    if redis.call('SISMEMBER', key_ready_index(P), queue) == 0 then return false end
    ready_seen[queue] = true
  end
  if paused[queue] == nil then paused[queue] = Gate.paused(P, queue) end
  return not paused[queue]
end
local function queue_blocked(queue)
  -- The settings are read once per call (no operation of this script changes them); the counts
  -- Gate.queue reads move with every claim, so they are read each time (includes/gates.lua).
  local l = qlimits[queue]
  if not l then
    l = Gate.settings(P, queue)
    qlimits[queue] = l
  end
  return Gate.queue(P, queue, l, now) ~= nil
end

-- Jobs popped in this call without being claimed (ended unclaimed, rescheduled, or parked back in a
-- lane): at most MAX_SKIPS, shared by every request of the call; the request that meets the budget
-- stops there with cut = 1.
local skips = 0
local cut = 0
-- Queues this call claimed from (P..'ready' is checked for them once, at the end).
local claimed_from = {}
-- Tenants' weights in a queue: the queue's tenancy setting's (read with its settings), else the global
-- ones (P..'tenant_weights'), read once per call and tenant.
local weights_read = {}
local function tenant_weight(queue, tenant)
  local w = Tenant.queue_weight(qlimits[queue].tenancy, tenant)
  if w then return w end
  w = weights_read[tenant]
  if not w then
    w = Tenant.weight_read(P, tenant)
    weights_read[tenant] = w
  end
  return w
end

-- claim(jk, id, f, queue, q, tenant, e, wf_state): the popped job starts (Verdict.job 'claim'): it
-- becomes active under a new lease, takes its key's units and its tenant's and queue's slots, and joins
-- the request's reply. tenant: as claim_from's; e: its key's limits; wf_state: its workflow's state.
local function claim(jk, id, f, queue, q, tenant, e, wf_state)
  local key = f.rl_key
  not_available(P, queue, f.priority)
  local vt = num(f.visibility_ms) or default_vt
  local lease = lease_deadline(now, vt, now, num(f.timeout_ms))
  local attempt = num(f.attempt, 0) + 1
  local claim_no = num(f.claims, 0) + 1
  local lease_text = text(lease)
  local w = rec_update(jk)
  if w then
    w.member, w.state, w.started_at, w.lease_until, w.worker_id = nil, 'active', now_text, lease_text, worker
    w.attempt, w.claims, w.lease_ms = text(attempt), text(claim_no), text(vt)
  end
  redis.call('ZADD', KEYS[1], lease_text, id)
  stat(P, queue, 'active', 1)
  if f.dedup or f.root_self then record_start(P, id, f, now) end
  if key then
    local units = RateKey.take(P, key, e, id, claim_no, lease, now)
    -- e.round: an adaptive key's round of decreases this start belongs to (rl_adaptive.lua).
    if w then w.rl_units, w.rl_round = units, e.round end
    Lane.open(P, q, key, true)
    -- Its holders changed: every lane of the key owes anew (rl_pool.lua).
    if e.floor then Pool.sync_all(P, key, e, now, q, 1) end
  end
  if tenant then
    Tenant.claimed(P, queue, tenant, id, lease, tenant_weight(queue, tenant), now)
    if w and tenant ~= '' then w.tslot = q end
  end
  if Gate.claimed(P, queue, qlimits[queue], id, claim_no, lease, now) then rec('HSET', jk, 'qrl', 1) end
  if wf_state then
    redis.call('HSETNX', key_workflow(P, f.wf), 'started_at', now)
  end
  ev_job_started(P, id, queue, f.type or '', now, attempt, worker)
  reply[#reply + 1] = Checkpoint.job_reply(P, id, jk)
  -- P..'ready' is made exact for the queues claimed from once, when the call ends (below): a request
  -- later in the call that still finds an emptied queue there pops nothing and drops it.
  claimed_from[queue] = true
end

-- claim_from(queue, tenant): take the best job of the queue (tenant nil: a queue without tenants) or of
-- one tenant's sub-queue of it ('' = the queue's jobs without a tenant) that may start, and make it
-- active; false when none can. A job whose rate-limit key is limited parks its lane (ratelimit.lua) and
-- the loop goes on. A tenant found with no ready job leaves the queue's fair share.
local function claim_from(queue, tenant)
  local q = Tenant.sub_queue(queue, tenant)
  local rk = key_queue_ready(P, q)
  -- A tenant with a concurrency in the queue (includes/tenant.lua): at its cap it leaves the fair share
  -- until a slot comes back; under it, a tenant parked before (its slot freed by a lapsed lease) is back.
  local capped = tenant and Tenant.cap(qlimits[queue].tenancy, tenant)
  if capped then
    if Gate.tenant(P, queue, tenant, qlimits[queue], now) then
      Tenant.park(P, queue, tenant)
      -- It may have been the queue's last tenant in the share: P..'ready' is made exact at the end (a
      -- FETCH of the whole queue does it at once; one acting as the tenant returns from here).
      claimed_from[queue] = true
      return false
    end
    Tenant.unpark(P, queue, tenant)
  end
  while true do
    -- Bounded work per call: past MAX_SKIPS the rest waits for the next call.
    if skips >= MAX_SKIPS then
      cut = 1
      return false
    end
    local popped = redis.call('ZPOPMIN', rk)
    if #popped == 0 then
      if tenant then
        redis.call('ZREM', key_queue_tenants(P, queue), tenant)
        if tenant ~= '' and redis.call('EXISTS', key_queue_heads(P, q), key_queue_parked(P, q)) == 0 then
          redis.call('SREM', key_queue_subs(P, queue), tenant)
        end
        claimed_from[queue] = true
      else
        redis.call('SREM', key_ready_index(P), queue)
        ready_seen[queue] = nil
      end
      return false
    end
    local member, score = popped[1], popped[2]
    local id = member_id(member)
    local jk = key_job(P, id)
    -- The record's own map (includes/record.lua rec_load, checked there): no table built to read it. Its
    -- fields dedup, root, root_ts, root_self and created_at are what supersede.lua reads, so the map is
    -- passed as is.
    local entry = rec_load(jk)
    local bad = entry.bad
    if bad or not entry.f then
      -- No usable job behind the member (its record is gone, or corrupt: set aside, rec_quarantine):
      -- the member leaves and the loop goes on; a lane it headed opens again at its key's next job
      -- (ratelimit.lua Lane.rebalance).
      skips = skips + 1
      if bad then rec_quarantine(P, id, bad, now) end
    else
      -- Pop, verdict (includes/verdict.lua), one small action.
      local f = entry.f
      local key = f.rl_key
      -- The popped head of its lane: the lane is open again only once something re-opens it.
      if key then redis.call('HDEL', key_queue_heads(P, q), key) end
      local kind, e, a, limit, current, wake = Verdict.job(P, id, f, q, qlimits[queue], now)
      if kind == 'claim' then
        claim(jk, id, f, queue, q, tenant, e, a)
        return true
      end
      skips = skips + 1
      Unclaimed.apply(P, kind, jk, id, f, queue, q, e, member, score, now, retention, a, limit, current, wake)
      -- The popped job did not start: its key's lane opened again or parked.
      if e and e.pool_size then Pool.sync(P, q, key, e.floor, now, nil, 0, e.pool_queue) end
    end
  end
end

-- claim_one(queue): claim the queue's next job for the request (see claim_from): its tenant's, when it
-- names one; else, for a queue with tenants, the best job of the tenant with the lowest pass
-- (includes/tenant.lua), trying the next tenant when one turns out to have none ready.
local function claim_one(queue)
  if queue_blocked(queue) then return false end
  local l = qlimits[queue]
  if req_tenant ~= '' then return claim_from(queue, req_tenant) end
  if not l.tenants then return claim_from(queue, nil) end
  -- The queue's jobs without a tenant share as tenant '' (looked at once per call: nothing else in this
  -- call adds to the queue's own ready set but a lane re-opened by a claim, which the next call sees).
  if not l.own_seen then
    l.own_seen = true
    if redis.call('ZCARD', key_queue_ready(P, queue)) > 0 then Tenant.join(P, queue, '') end
  end
  local tk = key_queue_tenants(P, queue)
  while true do
    local low = Tenant.next(tk)
    if not low then
      ready_index_check(P, queue)
      ready_seen[queue] = nil
      return false
    end
    if claim_from(queue, low) then return true end
    if cut == 1 then return false end
    skips = skips + 1
  end
end

-- serve(a): one request whose fields start at ARGV[a]; returns its reply and the next request's index.
local function serve(a)
  worker, default_vt = ARGV[a + REQ.worker_id], tonumber(ARGV[a + REQ.visibility_ms])
  req_tenant = ARGV[a + REQ.tenant]
  local want, strategy = tonumber(ARGV[a + REQ.count]), ARGV[a + REQ.strategy]
  local nq = tonumber(ARGV[a + REQ.nqueues])
  local next_a = a + REQ.STRIDE + QUEUE.STRIDE * nq
  reply = {'', 0}
  cut = 0
  local ack_id = ARGV[a + REQ.ack_id]
  if ack_id ~= '' then
    local acked = ack_job(P, key_job(P, ack_id), ack_id, ARGV[a + REQ.ack_result], retention, now,
      { lease = ARGV[a + REQ.ack_lease], attempt = ARGV[a + REQ.ack_attempt],
        worker = ARGV[a + REQ.ack_worker], used = ARGV[a + REQ.ack_used], tenant = req_tenant })
    reply[1] = acked
    if acked[1] ~= 'ok' then return reply, next_a end
  end
  if want < 1 or nq < 1 then return reply, next_a end
  -- reply[2] is set from cut when the request is done (below).
  local got = 0
  if nq == 1 and strategy ~= 'weighted' then
    -- One queue, strict (what every SDK's worker asks for): no table built for the request.
    local queue = ARGV[a + REQ.STRIDE + QUEUE.name]
    if queue_live(queue) then
      while got < want and claim_one(queue) do got = got + 1 end
    end
    reply[2] = cut
    return reply, next_a
  end

  local queues, weights = {}, {}
  for i = a + REQ.STRIDE, next_a - 1, QUEUE.STRIDE do
    queues[#queues + 1] = ARGV[i + QUEUE.name]
    weights[#weights + 1] = tonumber(ARGV[i + QUEUE.weight])
  end
  -- One SMISMEMBER against the ready-queue index, for the queues this call has not seen there, skips
  -- every empty queue without touching it.
  local ask = {}
  for _, q in ipairs(queues) do
    if not ready_seen[q] then ask[#ask + 1] = q end
  end
  if #ask > 0 then
    local has_ready = redis.call('SMISMEMBER', key_ready_index(P), unpack(ask))
    for i, q in ipairs(ask) do
      if has_ready[i] == 1 then ready_seen[q] = true end
    end
  end
  local live = {}
  for i, q in ipairs(queues) do
    live[i] = ready_seen[q] == true and queue_live(q)
  end
  if strategy == 'weighted' then
    got = Wrr.serve(P, ARGV[a + REQ.wrr_key], queues, weights, live, want, claim_one,
      function() return cut == 1 end)
  else
    for i, queue in ipairs(queues) do
      while got < want and live[i] do
        if claim_one(queue) then got = got + 1 else live[i] = false end
      end
      if got >= want or cut == 1 then break end
    end
  end
  reply[2] = cut
  return reply, next_a
end

-- Every request is checked before the first is served: a call refused for its arguments writes nothing.
local b = ARG.REST
while b <= #ARGV do
  check_REQ(b)
  local nq = tonumber(ARGV[b + REQ.nqueues])
  for i = 1, nq do check_QUEUE(b + REQ.STRIDE + (i - 1) * QUEUE.STRIDE) end
  b = b + REQ.STRIDE + nq * QUEUE.STRIDE
end
arg_layout('fetch', b == #ARGV + 1, 'REQ records, each followed by its nqueues QUEUE records')

local out = {'ok', now}
local a = ARG.REST
while a <= #ARGV do
  local r
  r, a = serve(a)
  out[#out + 1] = r
end
for queue in pairs(claimed_from) do ready_index_check(P, queue) end
return out
