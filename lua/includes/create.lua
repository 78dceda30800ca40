-- Writing new jobs: the one code of the three transitions that create them, each in its own script
-- with its own checks around it: enqueue-1.lua (a batch, or the server's coalesced single enqueues),
-- cron-fire-1.lua (one cron tick's job) and workflow-create-1.lua (a workflow's jobs). Each passes its
-- jobs as JOB records (declared here, once; a script's header names them `record JOB = create`), and
-- drives a creation `X` through these steps, in this order:
--   create_duplicate  all or nothing: a job id that exists or repeats refuses the call (nothing written)
--   create_begin      the creation: its per-queue state, read lazily (one HMGET of each queue's conf)
--   create_unique     all or nothing: a unique 'reject' conflict refuses the call (POST /jobs/batch)
--   create_tenancy    every job's tenant was resolved with its queue's tenancy setting as it is now
--   create_room       all or nothing: every bounded queue has room for all of the call's jobs
--   create_write      the jobs, one by one (each: per job, a duplicate, a conflict, a full queue)
--   create_end        the index entries gathered, the queues listed; the reply {'ok', now, states,
--                     pressure, found} (see enqueue-1.lua's RETURNS)
-- A refusal is the reply to return as it is; nothing has been written when one comes.
--
-- A workflow's jobs that wait for their turn (X.waits(i)) are written 'pending', in no index; X.wf =
-- {id, cb} marks each job with its workflow and its index or callback name. X.cron names the cron entry
-- whose tick creates the job: a unique holder that keeps it from being written is told as cron.skipped.
--
--   record JOB
--     +0  id               string UUIDv7
--     +1  queue            string
--     +2  job_type         string the job's type
--     +3  rank             int    lower runs first
--     +4  cold             bytes  the record's cold fields (includes/record.lua REC_COLD: doc, the job
--                                 JSON without system fields, max_attempts, backoff spec,
--                                 on_exhaustion, non_retryable when not empty), a MessagePack map the
--                                 server packed (ops/enqueue.rs ColdFields), stored as it is
--     +5  timeout_ms       ms    0 none
--     +6  visibility_ms    ms    0 server default
--     +7  expires_at       ms    ms; 0 none
--     +8  scheduled_at     ms    ms; 0 none
--     +9  delay_ms         ms    0 none
--     +10 priority         int    as the client gave it
--     +11 rl_key           string rate-limit key ('' none)
--     +12 rl_policy        string rate-limit policy (see includes/ratelimit.lua; '' none)
--     +13 expires_in_ms    ms    0 none: a relative expiry, resolved here as now + expires_in_ms
--     +14 unique_key       string '' none: no options.unique
--     +15 unique_states    string comma-separated
--     +16 unique_period_ms ms    0 none
--     +17 on_conflict      ''|'reject'|'ignore'|'replace'|'replace_except_schedule'|'raise_priority'
--     +18 dedup            string dedup fingerprint ('' none)
--     +19 root             string root-job signature hash ('' none)
--     +20 root_ts          int    root timestamp ms (0: the job's creation time)
--     +21 root_self        flag   1 when the job is the root itself
--     +22 tenant           string the job's tenant, its meta.tenant_id ('' none): it waits in its
--                                 tenant's sub-queue (includes/tenant.lua), and P..'tenant:'..tenant..
--                                 ':stats' counts it ('enqueued'; kept TENANT_STATS_MS past its last move,
--                                 and P..'tenants' lists the tenant by its last activity)
--     +23 tenancy          string the queue's tenancy setting the server resolved `tenant` with, as it
--                                 read it from the conf field 'tenancy' ('' = none: the tenant is
--                                 meta.tenant_id); when it is not the queue's now, nothing is written
--                                 and the reply is 'tenancy' (the server resolves again and retries)
--
-- CAPS: every loop here takes the call's n jobs (each script's header says what bounds n), or its
-- queues (at most n); ZADDs go 1,000 members at a time; a bounded queue's depth sums its per-priority
-- counts (one HVALS: as many fields as distinct priorities waiting in it).
--@include clock
--@include emit
--@include ready
--@include active
--@include cancel
--@include priority
--@include unique

-- create_duplicate(P, A, base, n): the first of the n JOB records from A[base] whose id exists or
-- repeats in the call, or nil.
local function create_duplicate(P, A, base, n)
  local seen = {}
  for i = 0, n - 1 do
    local id = A[base + i * JOB.STRIDE + JOB.id]
    if seen[id] or rec('EXISTS', key_job(P, id)) == 1 then return id end
    seen[id] = true
  end
  return nil
end

-- create_begin(P, A, base, n, now, retention): a creation of the n JOB records from A[base].
local function create_begin(P, A, base, n, now, retention)
  local X = { P = P, A = A, base = base, n = n, now = now, now_text = text(now), retention = retention,
    qs = {}, order = {}, creates = {}, states = {}, pressure = {}, found = {} }
  for i = 0, n - 1 do X.creates[i] = true end
  return X
end

-- The JOB record i (0-based) starts at A[X.base + i * JOB.STRIDE].

local function create_waits(X, i)
  return X.waits ~= nil and X.waits(i)
end

-- create_policy(X, b): the unique policy of the job whose fields start at A[b], or nil.
local function create_policy(X, b)
  local A = X.A
  if A[b + JOB.unique_key] == '' then return nil end
  return { key = A[b + JOB.unique_key], states = unique_state_set(A[b + JOB.unique_states]),
    period = tonumber(A[b + JOB.unique_period_ms]), on_conflict = A[b + JOB.on_conflict] }
end

local function create_replaces(u)
  return u.on_conflict == 'replace' or u.on_conflict == 'replace_except_schedule'
end

-- create_run_at(X, b): when the job may first run (Redis time), from scheduled_at and delay_ms.
local function create_run_at(X, b)
  local at = tonumber(X.A[b + JOB.scheduled_at])
  local delay = tonumber(X.A[b + JOB.delay_ms])
  if delay > 0 and X.now + delay > at then at = X.now + delay end
  return at
end

-- create_queue(X, queue): what the call adds to the queue: ready (score, member) pairs, per-priority
-- counts, scheduled count; and, for a queue with a depth bound, its depth as the call goes.
local function create_queue(X, queue)
  local c = X.qs[queue]
  if not c then
    local P = X.P
    local conf = redis.call('HMGET', key_queue_conf(P, queue), 'aging_s', 'bp_max_depth', 'bp_warn',
      'bp_strategy', 'tenancy')
    c = { aging = aging_setting(conf[1]), ready = {}, pri = {}, sched = 0, bound = whole(conf[2]),
      warn = conf[3] or '0.8', strategy = conf[4] or 'reject', tenancy = conf[5] or '' }
    if c.bound then
      local sk, pk = key_queue_stats(P, queue), key_queue_pri(P, queue)
      local depth = (whole(redis.call('HGET', sk, 'scheduled')) or 0) + count_pending(sk, 'scheduled')
        + count_pending(pk)
      for _, v in ipairs(redis.call('HVALS', pk)) do depth = depth + (whole(v) or 0) end
      c.depth = depth
    end
    X.qs[queue] = c
    X.order[#X.order + 1] = queue
  end
  return c
end

-- create_unique(X): all or nothing, a unique 'reject' conflict refuses the call before anything is
-- written. The call's earlier jobs count as written: `taken` is what each key's holder will be when
-- job i is reached. Jobs that a non-reject conflict keeps out are marked in X.creates.
local function create_unique(X)
  local taken = {}
  for i = 0, X.n - 1 do
    local b = X.base + i * JOB.STRIDE
    local u = create_policy(X, b)
    if u then
      local id, state, index
      local t = taken[u.key]
      if t then
        if u.states[t.state] then id, state, index = t.id, t.state, t.index end
      else
        id, state = unique_holder(X.P, u.key, u.states)
      end
      if id and u.on_conflict == 'reject' then return {'conflict', i, id, state, index or ''} end
      X.creates[i] = not id or create_replaces(u)
      if X.creates[i] then
        local at = create_run_at(X, b)
        if id and state == 'scheduled' and u.on_conflict == 'replace_except_schedule' then
          at = t and t.at or tonumber(rec('HGET', key_job(X.P, id), 'scheduled_at'))
        end
        taken[u.key] = { id = X.A[b + JOB.id], index = i, at = at, state = at > X.now and 'scheduled' or 'available' }
      end
    end
  end
  return nil
end

-- create_tenancy(X): every job's tenant was resolved with its queue's tenancy setting as it is now (a
-- pod that read an older one learns the new one here and calls again).
local function create_tenancy(X)
  for i = 0, X.n - 1 do
    local b = X.base + i * JOB.STRIDE
    local queue = X.A[b + JOB.queue]
    local c = create_queue(X, queue)
    if X.A[b + JOB.tenancy] ~= c.tenancy then return {'tenancy', queue, c.tenancy} end
  end
  return nil
end

local function create_reject(X, queue, c, jtype)
  ev_backpressure_rejected(X.P, '', queue, jtype, X.now, queue, c.depth, c.bound)
end

-- create_room(X): all or nothing, every bounded queue must have room for all of the call's jobs.
local function create_room(X)
  local adds = {}
  for i = 0, X.n - 1 do
    local queue = X.A[X.base + i * JOB.STRIDE + JOB.queue]
    if X.creates[i] and not create_waits(X, i) then adds[queue] = (adds[queue] or 0) + 1 end
  end
  for i = 0, X.n - 1 do
    local b = X.base + i * JOB.STRIDE
    local queue = X.A[b + JOB.queue]
    local c = create_queue(X, queue)
    if c.bound and adds[queue] and c.depth + adds[queue] > c.bound then
      create_reject(X, queue, c, X.A[b + JOB.job_type])
      return {'full', queue, c.depth, c.bound, c.strategy}
    end
  end
  return nil
end

-- opt(h, field, v, none): set field = v in the new job's fields h unless v is the "none" value.
local function create_opt(h, field, v, none)
  if v ~= none then
    h[field] = rec_str(v)
  end
end

-- create_flush(X): write the index entries the call has gathered so far, once per queue; before a job
-- is cancelled or re-prioritised here (it may be one this call wrote) and at the end.
local function create_flush(X)
  local P = X.P
  for _, queue in ipairs(X.order) do
    local c = X.qs[queue]
    local r = c.ready
    if #r > 0 then
      local rk = key_queue_ready(P, queue)
      for s = 1, #r, 1000 do
        redis.call('ZADD', rk, unpack(r, s, math.min(s + 999, #r)))
      end
      redis.call('SADD', key_ready_index(P), queue)
      local pk = key_queue_pri(P, queue)
      for priority, count in pairs(c.pri) do
        incr(pk, priority, count)
      end
    end
    if c.sched > 0 then stat(P, queue, 'scheduled', c.sched) end
    c.ready, c.pri, c.sched = {}, {}, 0
  end
end

-- create_write(X, each): write every job. `each`: the jobs stand alone, and a job whose id exists or
-- whose queue is full is refused by itself ('duplicate', 'full'); else create_duplicate and create_room
-- came first.
local function create_write(X, each)
  local P, A, now, retention = X.P, X.A, X.now, X.retention
  local states, found = X.states, X.found
  -- Sequence numbers for the whole call in one go (nil near the carry: next_member per job then).
  local hi, lo = seq_block(P, X.n)
  for i = 0, X.n - 1 do
    local b = X.base + i * JOB.STRIDE
    local id, queue, jtype = A[b + JOB.id], A[b + JOB.queue], A[b + JOB.job_type]
    local rank = tonumber(A[b + JOB.rank])
    local jk = key_job(P, id)
    local member = nil
    if hi then
      member = seq_member(hi, lo + i, id)
    end
    local c = create_queue(X, queue)
    local u = create_policy(X, b)
    local held, held_state
    if u then held, held_state = unique_holder(P, u.key, u.states) end
    if each and rec('EXISTS', jk) == 1 then
      states[#states + 1] = 'duplicate'
      found[#found + 1] = {}
    elseif held and not create_replaces(u) then
      -- A duplicate that is not written: refused, ignored, or ignored after raising the holder's
      -- priority (only if the newcomer runs sooner and the holder still waits; set_priority refuses
      -- other states).
      local hk = key_job(P, held)
      if u.on_conflict == 'raise_priority' and rank < tonumber(rec('HGET', hk, 'rank')) then
        create_flush(X)
        set_priority(P, hk, held, A[b + JOB.priority], rank, now)
      end
      states[#states + 1] = u.on_conflict == 'reject' and 'conflict' or 'ignored'
      found[#found + 1] = {held, rec_packed(hk)}
      if X.cron then
        ev_cron_skipped(P, held, queue, jtype, now, X.cron, 'unique: a job with this uniqueness key exists')
      end
    elseif each and c.bound and c.depth >= c.bound then
      create_reject(X, queue, c, jtype)
      states[#states + 1] = 'full'
      found[#found + 1] = {}
    else
      local at = create_run_at(X, b)
      if held then
        -- on_conflict replace: the holder is cancelled (job.cancelled) and this job takes its place.
        local hk = key_job(P, held)
        local hf = rec('HMGET', hk, 'queue', 'scheduled_at')
        if u.on_conflict == 'replace_except_schedule' and held_state == 'scheduled' then at = tonumber(hf[2]) end
        create_flush(X)
        local cancelled = cancel_job(P, hk, held, retention, now)
        local hc = X.qs[hf[1]]
        if cancelled[1] == 'ok' and cancelled[3] ~= 'active' and hc and hc.bound then hc.depth = hc.depth - 1 end
      end
      local waits = create_waits(X, i)
      if c.bound and not waits then c.depth = c.depth + 1 end
      local priority = A[b + JOB.priority]
      local tenant = A[b + JOB.tenant] ~= '' and A[b + JOB.tenant] or nil
      local rl_key = A[b + JOB.rl_key] ~= '' and A[b + JOB.rl_key] or nil
      -- The record's cold fields come packed by the server (includes/record.lua REC_COLD).
      local h = {queue = queue, type = jtype, rank = rec_str(rank), priority = priority, attempt = '0',
        created_at = X.now_text, enqueued_at = X.now_text, cold = A[b + JOB.cold]}
      if tenant then
        h.tenant = tenant
        Tenant.count(P, tenant, 'enqueued', now)
      end
      create_opt(h, 'timeout_ms', A[b + JOB.timeout_ms], '0')
      create_opt(h, 'visibility_ms', A[b + JOB.visibility_ms], '0')
      local expires_in = tonumber(A[b + JOB.expires_in_ms])
      create_opt(h, 'expires_at', expires_in > 0 and tostring(now + expires_in) or A[b + JOB.expires_at], '0')
      if u then
        create_opt(h, 'unique', u.key, '')
        create_opt(h, 'unique_states', A[b + JOB.unique_states], UNIQUE_DEFAULT_STATES)
        if u.period > 0 then create_opt(h, 'unique_until', now + u.period, '') end
        unique_take(P, u.key, id, u.period)
      end
      create_opt(h, 'dedup', A[b + JOB.dedup], '')
      if A[b + JOB.root] ~= '' then
        local ts = tonumber(A[b + JOB.root_ts])
        create_opt(h, 'root', A[b + JOB.root], '')
        create_opt(h, 'root_ts', ts > 0 and ts or now, '')
        create_opt(h, 'root_self', A[b + JOB.root_self], '0')
      end
      if rl_key then
        create_opt(h, 'rl_key', rl_key, '')
        create_opt(h, 'rl', A[b + JOB.rl_policy], '')
        RateKey.register(P, rl_key, A[b + JOB.rl_policy], now)
      end
      if X.wf then
        create_opt(h, 'wf', X.wf.id, '')
        create_opt(h, 'wf_i', X.wf.cb[i] or tostring(i), '')
      end
      found[#found + 1] = {}
      if waits then
        create_opt(h, 'state', 'pending', '')
        create_opt(h, 'scheduled_at', A[b + JOB.scheduled_at], '0')
        create_opt(h, 'hold_delay_ms', A[b + JOB.delay_ms], '0')
        rec_put(jk, h)
        ev_job_enqueued(P, id, queue, jtype, now, 'pending', X.wf.id)
        states[#states + 1] = 'pending'
      elseif at > now then
        create_opt(h, 'state', 'scheduled', '')
        create_opt(h, 'scheduled_at', at, '')
        rec_put(jk, h)
        redis.call('ZADD', key_scheduled(P), at, id)
        c.sched = c.sched + 1
        ev_job_scheduled(P, id, queue, jtype, now, at, nil)
        states[#states + 1] = 'scheduled'
      elseif rl_key or tenant then
        -- Through its lane, one by one (lane heads, parking: see ratelimit.lua), or into its tenant's
        -- sub-queue (includes/tenant.lua).
        create_opt(h, 'state', 'available', '')
        rec_put(jk, h)
        make_ready(P, jk, id, queue, rank, priority, now, rl_key, member)
        ev_job_enqueued(P, id, queue, jtype, now, nil, nil)
        states[#states + 1] = 'available'
      else
        member = member or next_member(P, id)
        create_opt(h, 'state', 'available', '')
        create_opt(h, 'member', member, '')
        rec_put(jk, h)
        local r = c.ready
        r[#r + 1] = text(aging_score(c.aging, rank, now))
        r[#r + 1] = member
        c.pri[priority] = (c.pri[priority] or 0) + 1
        ev_job_enqueued(P, id, queue, jtype, now, nil, nil)
        states[#states + 1] = 'available'
      end
    end
  end
end

-- create_end(X, queues_key): the index entries gathered are written, every queue of the call joins
-- `queues_key` (P..'queues'); the reply {'ok', now, states, pressure, found}.
local function create_end(X, queues_key)
  create_flush(X)
  local pressure = X.pressure
  for _, queue in ipairs(X.order) do
    local c = X.qs[queue]
    redis.call('SADD', queues_key, queue)
    if c.bound then
      pressure[#pressure + 1] = queue
      pressure[#pressure + 1] = c.depth
      pressure[#pressure + 1] = c.bound
      pressure[#pressure + 1] = c.warn
      pressure[#pressure + 1] = c.strategy
    end
  end
  return {'ok', X.now, X.states, pressure, X.found}
end
