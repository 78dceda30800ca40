-- enqueue-1.lua: create one or more jobs and make each ready or scheduled. A batch from
-- POST /jobs/batch is all or nothing; a batch the server coalesced from concurrent single enqueues is
-- 'each': a duplicate id fails only its own job.
--
-- KEYS
--   KEYS[1] P..'queues'   set    every queue name ever enqueued to (GET /queues); routes the script
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'; every other key is built from it and shares
--                                its cluster hash tag, so the script touches one slot
--   ARGV[2] n             int    number of jobs: n JOB records follow the fixed arguments
--   ARGV[3] mode          'all' (any duplicate id or unique 'reject' conflict: nothing is written) |
--                         'each' (per job) | 'cron': one job fired by a cron entry |
--                         'workflow': all or nothing like 'all', the jobs of one new workflow
--                         (includes/workflow.lua; its jobs carry no unique policy, dedup or root info)
--   ARGV[4] retention_ms  int    how long a job cancelled here by on_conflict replace or a cron
--                                overlap keeps its hash; 0 = forever
--   ARGV[5..] the n JOB records; then in 'cron' mode one CRON record; in 'workflow' mode one WF record
--           and then one callback name (on_complete | on_success | on_failure) for each of the n - m
--           jobs after its first m. A chain's steps after the first and every callback are written
--           'pending' (in no index, not counted in the queue's depth) until includes/workflow.lua
--           releases them
--   record JOB
--     +0  id               string UUIDv7
--     +1  queue            string
--     +2  job_type         string the job's type
--     +3  rank             int    lower runs first
--     +4  cold             bytes  the record's cold fields (includes/record.lua REC_COLD: doc, the job
--                                 JSON without system fields, max_attempts, backoff spec,
--                                 on_exhaustion, non_retryable when not empty), a MessagePack map the
--                                 server packed (ops/enqueue.rs ColdFields), stored as it is
--     +5  timeout_ms       int    0 none
--     +6  visibility_ms    int    0 server default
--     +7  expires_at       int    ms; 0 none
--     +8  scheduled_at     int    ms; 0 none
--     +9  delay_ms         int    0 none
--     +10 priority         int    as the client gave it
--     +11 rl_key           string rate-limit key ('' none)
--     +12 rl_policy        string rate-limit policy (see includes/ratelimit.lua; '' none)
--     +13 expires_in_ms    int    0 none: a relative expiry, resolved here as now + expires_in_ms
--     +14 unique_key       string '' none: no options.unique
--     +15 unique_states    string comma-separated
--     +16 unique_period_ms int    0 none
--     +17 on_conflict      string reject | ignore | replace | replace_except_schedule | raise_priority
--     +18 dedup            string dedup fingerprint ('' none)
--     +19 root             string root-job signature hash ('' none)
--     +20 root_ts          int    root timestamp ms (0: the job's creation time)
--     +21 root_self        '1' when the job is the root itself
--     +22 tenant           string the job's tenant, its meta.tenant_id ('' none): it waits in its
--                                 tenant's sub-queue (includes/tenant.lua), and P..'tenant:'..tenant..
--                                 ':stats' counts it ('enqueued'; kept TENANT_STATS_MS past its last move,
--                                 and P..'tenants' lists the tenant by its last activity)
--     +23 tenancy          string the queue's tenancy setting the server resolved `tenant` with, as it
--                                 read it from the conf field 'tenancy' ('' = none: the tenant is
--                                 meta.tenant_id); when it is not the queue's now, nothing is written
--                                 and the reply is 'tenancy' (the server resolves again and retries)
--   record CRON
--     +0  name             string the cron entry
--     +1  expected         int    its next_run_at as read (ms, the tick being fired)
--     +2  next_run_at      int    its new next_run_at ('' = none)
--     +3  overlap          string overlap_policy: skip | allow | cancel_previous | enqueue
--   record WF
--     +0  id               string workflow id
--     +1  kind             string chain | group | batch
--     +2  name             string
--     +3  m                int    the number of steps/jobs (the first m jobs)
-- RETURNS
--   {'ok', now_ms, states, pressure, found}
--      states   {state_1, ..., state_n}: 'available', 'scheduled', 'pending' (workflow), or, for a job
--               that was not written:
--               'conflict' (unique on_conflict reject; 'each' and 'cron' only), 'ignored' (on_conflict
--               ignore or raise_priority), ('each' only) 'duplicate' when a job with that id already
--               exists, 'full' when its queue is at its depth bound
--      pressure {queue, depth, bound, warning_threshold, strategy, ...} for each bounded queue the
--               call touched, depth counted after the call
--      found    {found_1, ..., found_n}: for a 'conflict' or 'ignored' job, {existing id, its record
--               packed (rec_packed), as it is after this call's changes to it}; else {}
--   {'duplicate', id}                        'all' and 'workflow': that job id exists (or repeats in
--                                            the batch), or that workflow id does; nothing was written
--   {'conflict', index, existing_id, existing_state, existing_index}
--                                            'all' only: job `index` (0-based) has unique on_conflict
--                                            reject and meets a job holding its key in one of its
--                                            states: stored (existing_index '') or earlier in the
--                                            batch; nothing was written
--   {'cron_taken'}                           'cron' only: the tick was already fired (by another pod) or
--                                            the entry changed; nothing was written
--   {'cron_skipped', previous_job_id}        'cron' only, overlap skip: the previous job has not ended
--                                            (active, or still waiting to run); the tick was claimed
--                                            (next_run_at advanced) and
--                                            cron.skipped emitted, no job written
--   {'tenancy', queue, setting}              any mode, before anything is written: a job's tenancy is
--                                            not its queue's setting (conf field 'tenancy', '' for
--                                            none); the server resolves the jobs' tenants with it and
--                                            calls again
--   {'full', queue, depth, bound, strategy}  'all', 'workflow' and 'cron' (a cron tick is claimed even so): the batch would take that queue past its
--                                            depth bound; no job was written (one
--                                            backpressure.rejected event was)
-- COST   O(log n) per job; per job a GET (does the id exist) and a SET of its record; once per batch and
--        queue: one ZADD of all the queue's ready entries, one sequence reservation, the per-priority
--        counts, the index SADDs (rate-limited jobs go through their lane one by one); once per call:
--        one XADD of all its events (includes/emit.lua); a job with a unique policy adds a GET of its key
--        (twice in an 'all' batch: the replay, then the writes), one GET of the holder's record (cached
--        for the call) and a SET; replace adds a cancel; a job with a tenant goes through its sub-queue one
--        by one (includes/tenant.lua: a ZSCORE of its fair-share entry, three more commands when the
--        tenant joins, an SADD to the queue's subs) and moves its counters (HINCRBY, PEXPIRE, ZADD and
--        ZREMRANGEBYSCORE of P..'tenants')
-- CAPS   the per-job loops take the call's n jobs: a batch (at most --max-batch, 10,000), a workflow
--        (at most 10,000 jobs and 3 callbacks), coalesced single enqueues (at most 256) or one cron
--        tick's job; a batch is one call by contract (all or nothing), so its size is the request's;
--        ZADDs go 1,000 members at a time; the depth of a bounded queue sums its per-priority counts
--        (one HVALS: as many fields as distinct priorities waiting in it)
-- CLOCK  Redis TIME
-- INVARIANTS
--   each new job is in exactly one index: its queue's ready set or its rate-limit lane (available), or
--   P..'scheduled' (scheduled), except a workflow's pending jobs, which are in none (their workflow's
--   list or callback fields hold them until includes/workflow.lua releases them); FIFO within a priority follows the order of the batch; 'all' writes no
--   job unless every id in the batch is new and every bounded queue has room for all of the batch's
--   jobs ('cron': the tick is claimed by compare-and-set on the entry's next_run_at in this same
--   script, so each tick fires once however many pods race, and a crash cannot fire it twice or lose
--   the job of a claimed tick); a queue's depth (available + scheduled + retryable: P..'q:'..Q..':pri' summed plus the
--   'scheduled' gauge) never passes its bound (P..'q:'..Q..':conf' bp_max_depth), because the check and
--   the writes are one script; a job with a rate-limit key makes its policy the key's
--   (newest wins; parked lanes of the key re-open when the limits change: includes/ratelimit.lua);
--   unique (includes/unique.lua): a job with options.unique is written only when no job holding its key
--   is in one of its states (checked here, so racing enqueues on any number of pods cannot both write;
--   a duplicate inside one call meets the earlier job exactly as a stored one); 'replace' cancels the
--   holder (job.cancelled) in the same script that writes its successor, 'raise_priority' changes the
--   holder's priority with PATCH's code (includes/priority.lua); every written job with a key takes it
--   (P..'unique:'..key = its id, PX period) and records it ('unique', and 'unique_states' unless the
--   default, 'unique_until' with a period: what a dead-letter retry checks again)
--@include clock
--@include emit
--@include ready
--@include active
--@include cancel
--@include priority
--@include unique
--@include workflow

local P = ARG.P
local n = tonumber(ARG.n)
local mode = ARG.mode
local each = mode == 'each'
local retention = tonumber(ARG.retention_ms)
local BASE = ARG.REST
local TAIL = BASE + n * JOB.STRIDE
local cron = nil
if mode == 'cron' then
  cron = { name = ARGV[TAIL + CRON.name], expected = ARGV[TAIL + CRON.expected], nxt = ARGV[TAIL + CRON.next_run_at],
    overlap = ARGV[TAIL + CRON.overlap] }
end
local wf = nil
if mode == 'workflow' then
  wf = { id = ARGV[TAIL + WF.id], type = ARGV[TAIL + WF.kind], name = ARGV[TAIL + WF.name],
    m = tonumber(ARGV[TAIL + WF.m]), cb = {} }
  for i = wf.m, n - 1 do wf.cb[i] = ARGV[TAIL + WF.STRIDE + i - wf.m] end
end
-- waits(i): job i (0-based) is written 'pending', to wait for its turn (workflow mode only).
local function waits(i)
  return wf ~= nil and ((wf.type == 'chain' and i > 0) or i >= wf.m)
end

if wf and redis.call('EXISTS', key_workflow(P, wf.id)) == 1 then return {'duplicate', wf.id} end

if not each then
  local seen = {}
  for i = 0, n - 1 do
    local id = ARGV[BASE + i * JOB.STRIDE + JOB.id]
    if seen[id] or rec('EXISTS', key_job(P, id)) == 1 then
      return {'duplicate', id}
    end
    seen[id] = true
  end
end

local now = now_ms()
local now_text = text(now)

-- policy(b): the unique policy of the job whose fields start at ARGV[b], or nil.
local function policy(b)
  if ARGV[b + JOB.unique_key] == '' then return nil end
  return { key = ARGV[b + JOB.unique_key], states = unique_state_set(ARGV[b + JOB.unique_states]),
    period = tonumber(ARGV[b + JOB.unique_period_ms]), on_conflict = ARGV[b + JOB.on_conflict] }
end

local function replaces(u)
  return u.on_conflict == 'replace' or u.on_conflict == 'replace_except_schedule'
end

-- run_at(b): when the job may first run (Redis time), from scheduled_at and delay_ms.
local function run_at(b)
  local at = tonumber(ARGV[b + JOB.scheduled_at])
  local delay = tonumber(ARGV[b + JOB.delay_ms])
  if delay > 0 and now + delay > at then at = now + delay end
  return at
end

-- 'all': a unique 'reject' conflict refuses the whole batch before anything is written. The batch's
-- earlier jobs count as written: `taken` is what each key's holder will be when job i is reached.
local creates = {}
for i = 0, n - 1 do creates[i] = true end
if mode == 'all' then
  local taken = {}
  for i = 0, n - 1 do
    local b = BASE + i * JOB.STRIDE
    local u = policy(b)
    if u then
      local id, state, index
      local t = taken[u.key]
      if t then
        if u.states[t.state] then id, state, index = t.id, t.state, t.index end
      else
        id, state = unique_holder(P, u.key, u.states)
      end
      if id and u.on_conflict == 'reject' then return {'conflict', i, id, state, index or ''} end
      creates[i] = not id or replaces(u)
      if creates[i] then
        local at = run_at(b)
        if id and state == 'scheduled' and u.on_conflict == 'replace_except_schedule' then
          at = t and t.at or tonumber(rec('HGET', key_job(P, id), 'scheduled_at'))
        end
        taken[u.key] = { id = ARGV[b + JOB.id], index = i, at = at, state = at > now and 'scheduled' or 'available' }
      end
    end
  end
end

-- Per queue, what the batch adds: ready (score, member) pairs, per-priority counts, scheduled count;
-- and, for a queue with a depth bound, its depth as the batch goes.
local qs, order = {}, {}
local function qinfo(queue)
  local c = qs[queue]
  if not c then
    local conf = redis.call('HMGET', key_queue_conf(P, queue), 'aging_s', 'bp_max_depth', 'bp_warn',
      'bp_strategy', 'tenancy')
    c = { aging = conf[1] and tonumber(conf[1]), ready = {}, pri = {}, sched = 0, bound = tonumber(conf[2]),
      warn = conf[3] or '0.8', strategy = conf[4] or 'reject',
      tenancy = conf[5] or '' }
    if c.bound then
      local sk, pk = key_queue_stats(P, queue), key_queue_pri(P, queue)
      local depth = tonumber(redis.call('HGET', sk, 'scheduled') or '0') + count_pending(sk, 'scheduled')
        + count_pending(pk)
      for _, v in ipairs(redis.call('HVALS', pk)) do depth = depth + tonumber(v) end
      c.depth = depth
    end
    qs[queue] = c
    order[#order + 1] = queue
  end
  return c
end

-- Every job's tenant was resolved with its queue's tenancy setting as it is now (a pod that read an
-- older one learns the new one here and calls again): checked before anything is written.
for i = 0, n - 1 do
  local b = BASE + i * JOB.STRIDE
  local c = qinfo(ARGV[b + JOB.queue])
  if ARGV[b + JOB.tenancy] ~= c.tenancy then return {'tenancy', ARGV[b + JOB.queue], c.tenancy} end
end

-- A cron firing claims its tick first: only the caller that saw this next_run_at fires it.
if cron then
  local ck = key_cron(P, cron.name)
  local cur = redis.call('HMGET', ck, 'next_run_at', 'last_job')
  if cur[1] ~= cron.expected then return {'cron_taken'} end
  if cron.nxt ~= '' then
    redis.call('HSET', ck, 'next_run_at', cron.nxt)
    redis.call('ZADD', key_cron_due(P), cron.nxt, cron.name)
  else
    redis.call('HDEL', ck, 'next_run_at')
    redis.call('ZREM', key_cron_due(P), cron.name)
  end
  redis.call('HSET', ck, 'last_run_at', now)
  redis.call('HINCRBY', ck, 'run_count', 1)
  -- skip: the previous run has not ended (running, or still waiting to run: another run would only pile
  -- up behind it); cancel_previous: the previous run is running.
  local prev = cur[2]
  local prev_state = prev and rec('HGET', key_job(P, prev), 'state')
  if cron.overlap == 'skip' and prev_state and prev_state ~= 'completed' and prev_state ~= 'cancelled'
    and prev_state ~= 'discarded' then
    ev_cron_skipped(P, prev, ARGV[BASE + JOB.queue], ARGV[BASE + JOB.job_type], now, cron.name,
      'previous run still ' .. prev_state)
    return {'cron_skipped', prev}
  end
  if cron.overlap == 'cancel_previous' and prev_state == 'active' then
    cancel_job(P, key_job(P, prev), prev, retention, now)
  end
end

local states, pressure, found = {}, {}, {}
local reply = {'ok', now, states, pressure, found}

local function reject(queue, c, jtype)
  ev_backpressure_rejected(P, '', queue, jtype, now, queue, c.depth, c.bound)
end

-- All or nothing: every bounded queue must have room for all of the batch's jobs before any is written.
if not each then
  local adds = {}
  for i = 0, n - 1 do
    local queue = ARGV[BASE + i * JOB.STRIDE + JOB.queue]
    if creates[i] and not waits(i) then adds[queue] = (adds[queue] or 0) + 1 end
  end
  for i = 0, n - 1 do
    local queue = ARGV[BASE + i * JOB.STRIDE + JOB.queue]
    local c = qinfo(queue)
    if c.bound and adds[queue] and c.depth + adds[queue] > c.bound then
      reject(queue, c, ARGV[BASE + i * JOB.STRIDE + JOB.job_type])
      return {'full', queue, c.depth, c.bound, c.strategy}
    end
  end
end

-- opt(h, field, v, none): set field = v in the new job's fields h unless v is the "none" value.
local function opt(h, field, v, none)
  if v ~= none then
    h[field] = rec_str(v)
  end
end

-- flush(): write the index entries the call has gathered so far (ZADD in chunks to stay within Lua's
-- unpack limit), once per queue; before a job is cancelled or re-prioritised here (it may be one this
-- call wrote) and at the end.
local function flush()
  for _, queue in ipairs(order) do
    local c = qs[queue]
    local r = c.ready
    if #r > 0 then
      local rk = key_queue_ready(P, queue)
      for s = 1, #r, 1000 do
        redis.call('ZADD', rk, unpack(r, s, math.min(s + 999, #r)))
      end
      redis.call('SADD', key_ready_index(P), queue)
      local pk = key_queue_pri(P, queue)
      for priority, count in pairs(c.pri) do
        redis.call('HINCRBY', pk, priority, count)
      end
    end
    if c.sched > 0 then stat(P, queue, 'scheduled', c.sched) end
    c.ready, c.pri, c.sched = {}, {}, 0
  end
end

-- Sequence numbers for the whole batch in one call (nil near the carry: next_member per job then).
local hi, lo = seq_block(P, n)

for i = 0, n - 1 do
  local b = BASE + i * JOB.STRIDE
  local id, queue, jtype = ARGV[b + JOB.id], ARGV[b + JOB.queue], ARGV[b + JOB.job_type]
  local rank = tonumber(ARGV[b + JOB.rank])
  local jk = key_job(P, id)
  local member = nil
  if hi then
    member = seq_member(hi, lo + i, id)
  end
  local c = qinfo(queue)
  local u = policy(b)
  local held, held_state
  if u then held, held_state = unique_holder(P, u.key, u.states) end
  if each and rec('EXISTS', jk) == 1 then
    states[#states + 1] = 'duplicate'
    found[#found + 1] = {}
  elseif held and not replaces(u) then
    -- A duplicate that is not written: refused, ignored, or ignored after raising the holder's priority
    -- (only if the newcomer runs sooner and the holder still waits; set_priority refuses other states).
    local hk = key_job(P, held)
    if u.on_conflict == 'raise_priority' and rank < tonumber(rec('HGET', hk, 'rank')) then
      flush()
      set_priority(P, hk, held, ARGV[b + JOB.priority], rank, now)
    end
    states[#states + 1] = u.on_conflict == 'reject' and 'conflict' or 'ignored'
    found[#found + 1] = {held, rec_packed(hk)}
    if cron then
      ev_cron_skipped(P, held, queue, jtype, now, cron.name, 'unique: a job with this uniqueness key exists')
    end
  elseif each and c.bound and c.depth >= c.bound then
    reject(queue, c, jtype)
    states[#states + 1] = 'full'
    found[#found + 1] = {}
  else
    local at = run_at(b)
    if held then
      -- on_conflict replace: the holder is cancelled (job.cancelled) and this job takes its place.
      local hk = key_job(P, held)
      local hf = rec('HMGET', hk, 'queue', 'scheduled_at')
      if u.on_conflict == 'replace_except_schedule' and held_state == 'scheduled' then at = tonumber(hf[2]) end
      flush()
      local cancelled = cancel_job(P, hk, held, retention, now)
      local hc = qs[hf[1]]
      if cancelled[1] == 'ok' and cancelled[3] ~= 'active' and hc and hc.bound then hc.depth = hc.depth - 1 end
    end
    if c.bound and not waits(i) then c.depth = c.depth + 1 end
    local priority = ARGV[b + JOB.priority]
    local tenant = ARGV[b + JOB.tenant] ~= '' and ARGV[b + JOB.tenant] or nil
    local rl_key = ARGV[b + JOB.rl_key] ~= '' and ARGV[b + JOB.rl_key] or nil
    -- The record's cold fields come packed by the server (includes/record.lua REC_COLD).
    local h = {queue = queue, type = jtype, rank = rec_str(rank), priority = priority, attempt = '0',
      created_at = now_text, enqueued_at = now_text, cold = ARGV[b + JOB.cold]}
    if tenant then
      h.tenant = tenant
      tenant_count(P, tenant, 'enqueued', now)
    end
    opt(h, 'timeout_ms', ARGV[b + JOB.timeout_ms], '0')
    opt(h, 'visibility_ms', ARGV[b + JOB.visibility_ms], '0')
    local expires_in = tonumber(ARGV[b + JOB.expires_in_ms])
    opt(h, 'expires_at', expires_in > 0 and tostring(now + expires_in) or ARGV[b + JOB.expires_at], '0')
    if u then
      opt(h, 'unique', u.key, '')
      opt(h, 'unique_states', ARGV[b + JOB.unique_states], UNIQUE_DEFAULT_STATES)
      if u.period > 0 then opt(h, 'unique_until', now + u.period, '') end
      unique_take(P, u.key, id, u.period)
    end
    opt(h, 'dedup', ARGV[b + JOB.dedup], '')
    if ARGV[b + JOB.root] ~= '' then
      local ts = tonumber(ARGV[b + JOB.root_ts])
      opt(h, 'root', ARGV[b + JOB.root], '')
      opt(h, 'root_ts', ts > 0 and ts or now, '')
      opt(h, 'root_self', ARGV[b + JOB.root_self], '0')
    end
    if rl_key then
      opt(h, 'rl_key', rl_key, '')
      opt(h, 'rl', ARGV[b + JOB.rl_policy], '')
      rl_register(P, rl_key, ARGV[b + JOB.rl_policy], now)
    end
    if wf then
      opt(h, 'wf', wf.id, '')
      opt(h, 'wf_i', wf.cb[i] or tostring(i), '')
    end
    found[#found + 1] = {}
    if waits(i) then
      opt(h, 'state', 'pending', '')
      opt(h, 'scheduled_at', ARGV[b + JOB.scheduled_at], '0')
      opt(h, 'hold_delay_ms', ARGV[b + JOB.delay_ms], '0')
      rec_put(jk, h)
      ev_job_enqueued(P, id, queue, jtype, now, 'pending', wf.id)
      states[#states + 1] = 'pending'
    elseif at > now then
      opt(h, 'state', 'scheduled', '')
      opt(h, 'scheduled_at', at, '')
      rec_put(jk, h)
      redis.call('ZADD', key_scheduled(P), at, id)
      c.sched = c.sched + 1
      ev_job_scheduled(P, id, queue, jtype, now, at, nil)
      states[#states + 1] = 'scheduled'
    elseif rl_key or tenant then
      -- Through its lane, one by one (lane heads, parking: see ratelimit.lua), or into its tenant's
      -- sub-queue (includes/tenant.lua).
      opt(h, 'state', 'available', '')
      rec_put(jk, h)
      make_ready(P, jk, id, queue, rank, priority, now, rl_key, member)
      ev_job_enqueued(P, id, queue, jtype, now, nil, nil)
      states[#states + 1] = 'available'
    else
      member = member or next_member(P, id)
      opt(h, 'state', 'available', '')
      opt(h, 'member', member, '')
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

flush()
for _, queue in ipairs(order) do
  local c = qs[queue]
  redis.call('SADD', KEYS[1], queue)
  if c.bound then
    pressure[#pressure + 1] = queue
    pressure[#pressure + 1] = c.depth
    pressure[#pressure + 1] = c.bound
    pressure[#pressure + 1] = c.warn
    pressure[#pressure + 1] = c.strategy
  end
end
if wf then
  local wk = key_workflow(P, wf.id)
  local h = {'type', wf.type, 'name', wf.name, 'state', 'running', 'total', wf.m, 'completed', 0, 'failed', 0,
    'created_at', now}
  if wf.type == 'chain' then
    h[#h + 1] = 'cursor'
    h[#h + 1] = 0
  end
  local ids = {}
  for i = 0, n - 1 do
    local id = ARGV[BASE + i * JOB.STRIDE + JOB.id]
    if i < wf.m then
      ids[#ids + 1] = id
    else
      h[#h + 1] = 'cb_' .. wf.cb[i]
      h[#h + 1] = id
    end
  end
  redis.call('HSET', wk, unpack(h))
  for s = 1, #ids, 1000 do
    redis.call('RPUSH', key_workflow_jobs(P, wf.id), unpack(ids, s, math.min(s + 999, #ids)))
  end
  redis.call('ZADD', key_workflows(P), now, wf.id)
  ev_workflow_created(P, '', '', '', now, wf.id, wf.type, wf.name)
end
if cron and (states[1] == 'available' or states[1] == 'scheduled') then
  local id = ARGV[BASE + JOB.id]
  redis.call('HSET', key_cron(P, cron.name), 'last_job', id)
  ev_cron_triggered(P, id, ARGV[BASE + JOB.queue], ARGV[BASE + JOB.job_type], now, cron.name)
end
return reply
