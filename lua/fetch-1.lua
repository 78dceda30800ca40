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
--                              rate-limit window entry counts that instead (ratelimit.lua rl_used)
--   record QUEUE
--     +0  name          string the queue
--     +1  weight        int(0..1000) ignored by strict; > 0 for weighted
-- RETURNS
--   {'ok', now_ms, reply_1, ..., reply_n}   one reply per request, in order; reply_i is
--                                            {ack, cut, job_1, ..., job_k}: k <= count; cut is 1 when the
--                                            request stopped on the call's MAX_SKIPS budget before it had
--                                            claimed count jobs (more may be claimable: call again), else
--                                            0; job_i is the claimed
--                                            job's record as stored after the claim (the MessagePack of
--                                            includes/record.lua), or {record, parent_results} for a
--                                            workflow job with parents (includes/workflow.lua
--                                            wf_job_reply); ack is '' (no ACK asked) or ack_job's reply
--                                            (see includes/ack.lua); when that reply is not 'ok', k = 0.
--                                            A refused request changes nothing and does not affect the
--                                            others.
-- COST   per request as if it ran alone; the call's fixed costs (one round trip, TIME) and its reads of
--        each queue's state (ready index, paused flag, settings) are shared by its requests.
--        O(log n) per claimed job (ZPOPMIN); empty queues are skipped with one SMISMEMBER on the
--        ready-queue index P..'ready' for those of a request's queues the call has not seen there yet
--        (a SISMEMBER for a one-queue strict request, none once seen; kept exact with one ZCARD per
--        queue claimed from and call, not per job); weighted adds O(queues) per claimed job; a
--        rate-limited key costs one pop per lane per blocking episode, however many jobs it holds;
--        a key's check reads its dynamic block and both units counters in one MGET (ratelimit.lua
--        "Costs"); a key whose jobs carry costs adds a ZRANGE of lapsed holders (an HMGET when there
--        are some) and a ZRANGE of expired window entries per check, and a claim of u > 1 units adds
--        an HSET and INCRBY (concurrency) and an INCRBY and PEXPIRE (window); an ACK with ack_used adds
--        a ZSCORE, and when it changes the count a ZADD, ZREM, INCRBY, PTTL and PEXPIRE; a key whose
--        policy is adaptive adds an HMGET of its adaptation per check, and its ACK a GET of the policy,
--        an HMGET, a ZCOUNT and an HINCRBY (more when it steps up: ratelimit.lua rl_adapt_up); a key with
--        a floor in a queue with a pool (ratelimit.lua "Burstable concurrency") adds per check an HGET
--        of the floors owed and, past its floor, a ZCOUNT of the queue's holders, and per pop
--        burst_sync: a ZCOUNT of the key's holders, and unless the key holds its floor before and after
--        (burst_skip) an HEXISTS (an HGET when parked), an HGET and, when its part changes, an HSET or
--        HDEL, an HINCRBY and a ZPOPMIN of the pool's waiting lanes (a claim does so for every lane of
--        the key, after an SMEMBERS and an HGET of each lane's queue conf); a park by the pool adds a ZADD
--        and a PEXPIRE of the pool's waiting lanes; an ACK of a job in a queue with a queue-level
--        concurrency adds a ZPOPMIN of those (and re-opens at most POOL_WAKE_MAX = 10 lanes); a job with
--        options.dedup or options.root_job adds one GET when popped and one SET (a root: GET + SET)
--        when claimed; a claimed workflow job with parents (a chain step after the first, a batch
--        callback) adds one HMGET of its parents' results per 1000 of them (wf_job_reply); an ACK or
--        discard of a workflow job advances it in O(1), except the ends that close it or fire work
--        (includes/workflow.lua: a failed chain visits its steps once, at most 10,000; a batch's last
--        end visits at most 3 callbacks; a close drops at most 3 pending callbacks and trims at most
--        WF_TRIM = 100 expired workflows from the listing index); a queue with tenants
--        (includes/tenant.lua) adds one ZCARD per call and queue, and per claim the pick (ZRANGE 0 0),
--        the tenant's pass (ZINCRBY), its weight (HGET, once per call and tenant, none when the queue's
--        tenancy setting gives it one: that setting is read with the queue's other settings and decoded
--        once per call) and its counters (HINCRBY, PEXPIRE, ZADD, ZREMRANGEBYSCORE, and two HINCRBY of
--        its minute's count, whose PEXPIREAT is once per call); a tenant found with nothing ready costs
--        a pop and an EXISTS; a tenant with a concurrency in the queue (includes/tenant.lua) adds per
--        claim a ZCOUNT of its slots, an SREM and a ZADD, and one at its cap a ZREM and SADD (it parks,
--        counted against MAX_SKIPS); the end's ready-index check adds an EXISTS of the fair-share set for a queue whose own
--        ready set is empty, with or without tenants
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
--   P..'ready' in the same script that takes its last ready job. Weighted: over any run of sum(weights)
--   consecutive claims while every listed queue has ready jobs, queue i is chosen exactly weight_i
--   times (the smooth round-robin sequence is periodic with that period), and a queue with ready jobs
--   and weight > 0 is chosen within sum(weights) claims, so it never starves. A workflow job's first
--   claim stamps its workflow's started_at; a workflow job discarded here advances its workflow
--   (includes/workflow.lua) in this script.
--   Duplicates (includes/supersede.lua): a popped job with options.dedup whose deduplication info
--   started in another job after it was created, or with options.root_job whose signature's newest
--   started root is newer than its own root timestamp, is never handed out: it completes (state
--   completed, field superseded, event job.superseded) in this script, within MAX_SKIPS; a claimed
--   job with options.dedup, or a root job, records its start here, atomically with the claim.
--@include clock
--@include emit
--@include ready
--@include active
--@include ack
--@include supersede
--@include errors
--@include gates

local MAX_SKIPS = 100
--@include tenant
local WRR_KEEP_MS = 86400000
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
  if paused[queue] == nil then paused[queue] = queue_paused(P, queue) end
  return not paused[queue]
end
local function queue_blocked(queue)
  -- The settings are read once per call (no operation of this script changes them); the counts
  -- queue_gate reads move with every claim, so they are read each time (includes/gates.lua).
  local l = qlimits[queue]
  if not l then
    l = queue_settings(P, queue)
    qlimits[queue] = l
  end
  return queue_gate(P, queue, l, now) ~= nil
end

-- Jobs popped in this call without being claimed (ended unclaimed, rescheduled, or parked back in a
-- lane): at most MAX_SKIPS, shared by every request of the call; the request that meets the budget
-- stops there with cut = 1.
local skips = 0
local cut = 0
-- Queues this call claimed from (P..'ready' is checked for them once, at the end).
local claimed_from = {}
-- end_unclaimed(jk, id, queue, state, fields): a popped job ends without being claimed (discarded, or
-- completed as superseded); the caller wrote its event.
local function end_unclaimed(jk, id, queue, state, fields)
  rec('HSET', jk, 'state', state, state .. '_at', now, unpack(fields))
  rec('HDEL', jk, 'member')
  stat(P, queue, state, 1)
  finish(P, jk, id, retention)
  local w = rec('HMGET', jk, 'wf', 'wf_i')
  wf_job_ended(P, w[1], w[2], 'failed', nil, now, retention)
end

local function discard_now(jk, id, queue, code, message)
  end_unclaimed(jk, id, queue, 'discarded', {'error', error_entry(error_json(code, message))})
end

-- Tenants' weights in a queue: the queue's tenancy setting's (read with its settings), else the global
-- ones (P..'tenant_weights'), read once per call and tenant.
local weights_read = {}
local function tenant_weight(queue, tenant)
  local w = tenant_queue_weight(qlimits[queue].tenancy, tenant)
  if w then return w end
  w = weights_read[tenant]
  if not w then
    w = tenant_weight_read(P, tenant)
    weights_read[tenant] = w
  end
  return w
end

-- claim_from(queue, tenant): take the best job of the queue (tenant nil: a queue without tenants) or of
-- one tenant's sub-queue of it ('' = the queue's jobs without a tenant) that may start, and make it
-- active; false when none can. A job whose rate-limit key is limited parks its lane (ratelimit.lua) and
-- the loop goes on. A tenant found with no ready job leaves the queue's fair share.
local function claim_from(queue, tenant)
  local q = sub_queue(queue, tenant)
  local rk = key_queue_ready(P, q)
  -- A tenant with a concurrency in the queue (includes/tenant.lua): at its cap it leaves the fair share
  -- until a slot comes back; under it, a tenant parked before (its slot freed by a lapsed lease) is back.
  local capped = tenant and tenant_cap(qlimits[queue].tenancy, tenant)
  if capped then
    if tenant_gate(P, queue, tenant, qlimits[queue], now) then
      tenant_park(P, queue, tenant)
      -- It may have been the queue's last tenant in the share: P..'ready' is made exact at the end (a
      -- FETCH of the whole queue does it at once; one acting as the tenant returns from here).
      claimed_from[queue] = true
      return false
    end
    tenant_unpark(P, queue, tenant)
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
      -- (ratelimit.lua lane_rebalance).
      skips = skips + 1
      if bad then rec_quarantine(P, id, bad, now) end
    else
      local f = entry.f
      local jtype, key, priority, wf = f.type or '', f.rl_key, f.priority, f.wf
      local superseded = nil
      if f.dedup or f.root then superseded = superseded_by(P, id, f) end
      -- A member of a workflow being cancelled whose sweep has not reached it yet never starts.
      local wf_state = wf and redis.call('HGET', key_workflow(P, wf), 'state')
      local e, limited = nil, nil
      if key then
        redis.call('HDEL', key_queue_heads(P, q), key)
        e = rl_effective(P, key, rl_policy(P, key, f.rl))
        rl_pool(P, e, q, qlimits[queue])
      end
      if num(f.expires_at, now + 1) <= now then
        skips = skips + 1
        not_available(P, queue, priority)
        ev_job_expired(P, id, queue, jtype, now)
        discard_now(jk, id, queue, 'expired', EXPIRED_ERROR)
        if key then lane_open(P, q, key, true) end
      elseif wf_state == 'cancelled' then
        skips = skips + 1
        not_available(P, queue, priority)
        ev_job_cancelled(P, id, queue, jtype, now, 'available', 'workflow cancelled')
        end_unclaimed(jk, id, queue, 'cancelled', {})
        if key then lane_open(P, q, key, true) end
      elseif superseded then
        -- MediaWiki's deduplication: a newer run made this one pointless; it completes unrun.
        skips = skips + 1
        not_available(P, queue, priority)
        local why = cjson.encode(superseded)
        ev_job_superseded(P, id, queue, jtype, now, why)
        end_unclaimed(jk, id, queue, 'completed', {'superseded', why})
        if key then lane_open(P, q, key, true) end
      else
        local strategy, limit, current, wake
        if key then strategy, limit, current, wake = rl_check(P, key, e, now) end
        if strategy then
          skips = skips + 1
          -- One rate_limit.exceeded per blocking episode, not one per skipped job.
          if redis.call('HSETNX', key_rl_state(P, key), 'blocked_since', now) == 1 then
            redis.call('HSET', key_rl_state(P, key), 'strategy', strategy, 'until', wake)
            incr(key_rl_stats(P, key), 'exceeded_' .. strategy, 1)
            ev_rate_limit_exceeded(P, id, queue, jtype, now, key, strategy, limit, current)
          end
          if e.on_limit == 'drop' then
            not_available(P, queue, priority)
            ev_rate_limit_dropped(P, id, queue, jtype, now, key, strategy)
            discard_now(jk, id, queue, 'rate_limited', 'dropped: rate limit ' .. key .. ' reached (on_limit drop)')
            -- A dropped job does not park its lane: the next job of the lane faces the limit under its
            -- own on_limit (a waiting job then parks the lane; a dropping one is dropped in turn).
            lane_open(P, q, key, true)
            if wake >= 0 then redis.call('ZADD', key_rl_wake(P), wake, q .. '\n' .. key) end
          elseif e.on_limit == 'reschedule' and wake > now then
            not_available(P, queue, priority)
            rec('HDEL', jk, 'member')
            rec('HSET', jk, 'state', 'scheduled', 'scheduled_at', wake)
            redis.call('ZADD', key_scheduled(P), wake, id)
            stat(P, queue, 'scheduled', 1)
            ev_job_scheduled(P, id, queue, jtype, now, wake, 'rate_limit')
            lane_park(P, q, key, nil, nil, wake, strategy, e.pool_size and e.floor, e.pool_queue, now)
          else
            lane_park(P, q, key, member, score, wake, strategy, e.pool_size and e.floor, e.pool_queue, now)
          end
        else
          not_available(P, queue, priority)
          local vt = num(f.visibility_ms) or default_vt
          local lease = lease_deadline(now, vt, now, num(f.timeout_ms))
          local attempt = num(f.attempt, 0) + 1
          local claim = num(f.claims, 0) + 1
          local lease_text = text(lease)
          local w = rec_update(jk)
          if w then
            w.member, w.state, w.started_at, w.lease_until, w.worker_id = nil, 'active', now_text, lease_text, worker
            w.attempt, w.claims, w.lease_ms = text(attempt), text(claim), text(vt)
          end
          redis.call('ZADD', KEYS[1], lease_text, id)
          stat(P, queue, 'active', 1)
          if f.dedup or f.root_self then record_start(P, id, f, now) end
          if key then
            local units = rl_take(P, key, e, id, claim, lease, now)
            -- e.round: an adaptive key's round of decreases this start belongs to (ratelimit.lua).
            if w then w.rl_units, w.rl_round = units, e.round end
            lane_open(P, q, key, true)
            -- Its holders changed: every lane of the key owes anew (ratelimit.lua, "Burstable concurrency").
            if e.floor then burst_sync_all(P, key, e, now, q, 1) end
          end
          if tenant and tenant ~= '' then
            -- One of the tenant's slots in the queue, held as the job's lease is (its end gives it back:
            -- leave_active), whether or not the tenant has a cap now: a cap set later counts the jobs
            -- already running (issue 37 item 7).
            redis.call('ZADD', key_queue_rl_active(P, q), lease, id)
            if w then w.tslot = q end
          end
          if tenant then
            redis.call('ZINCRBY', key_queue_tenants(P, queue), 1 / tenant_weight(queue, tenant), tenant)
            if tenant ~= '' then tenant_dispatched(P, tenant, now) end
          end
          local ql = qlimits[queue]
          if ql.conc or ql.rate_limit then
            if ql.conc then redis.call('ZADD', key_queue_rl_active(P, queue), lease, id) end
            if ql.rate_limit and ql.rate_period then
              redis.call('ZADD', key_queue_rl_win(P, queue), now, id .. ':' .. claim)
              redis.call('PEXPIRE', key_queue_rl_win(P, queue), ql.rate_period)
            end
            rec('HSET', jk, 'qrl', 1)
          end
          if wf_state then
            redis.call('HSETNX', key_workflow(P, wf), 'started_at', now)
          end
          ev_job_started(P, id, queue, jtype, now, attempt, worker)
          reply[#reply + 1] = wf_job_reply(P, jk)
          -- P..'ready' is made exact for the queues claimed from once, when the call ends (below): a
          -- request later in the call that still finds an emptied queue there pops nothing and drops it.
          claimed_from[queue] = true
          return true
        end
      end
    -- The popped job did not start: its key's lane opened again or parked.
    if e and e.pool_size then burst_sync(P, q, key, e.floor, now, nil, 0, e.pool_queue) end
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
    if redis.call('ZCARD', key_queue_ready(P, queue)) > 0 then tenant_join(P, queue, '') end
  end
  local tk = key_queue_tenants(P, queue)
  while true do
    local low = tenant_next(tk)
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
    local sk = key_wrr(P, ARGV[a + REQ.wrr_key])
    local cw = {}
    local saved = redis.call('HMGET', sk, unpack(queues))
    for i = 1, #queues do cw[i] = tonumber(saved[i]) or 0 end
    while got < want do
      local total, best = 0, nil
      for i = 1, #queues do
        if live[i] then
          total = total + weights[i]
          cw[i] = cw[i] + weights[i]
          if not best or cw[i] > cw[best] then best = i end
        end
      end
      if not best then break end
      cw[best] = cw[best] - total
      if claim_one(queues[best]) then
        got = got + 1
      else
        -- The queue ran dry: undo this round as if it had not been eligible, and go again without it.
        cw[best] = cw[best] + total
        for i = 1, #queues do
          if live[i] then cw[i] = cw[i] - weights[i] end
        end
        -- Stopped by the call's budget: the queue is not dry, the request goes on in the next call.
        if cut == 1 then break end
        live[best] = false
      end
    end
    local flat = {}
    for i = 1, #queues do
      flat[#flat + 1] = queues[i]
      flat[#flat + 1] = cw[i]
    end
    redis.call('HSET', sk, unpack(flat))
    -- One such key per distinct list of queues and weights: it lives a day past its last use.
    redis.call('PEXPIRE', sk, WRR_KEEP_MS)
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
