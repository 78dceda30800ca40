-- enqueue-1.lua: create one or more jobs and make each ready or scheduled. A batch from
-- POST /jobs/batch is all or nothing; a batch the server coalesced from concurrent single enqueues is
-- 'each': a duplicate id fails only its own job.
--
-- KEYS
--   KEYS[1] P..'queues'   set    every queue name ever enqueued to (GET /queues); routes the script
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'; every other key is built from it and shares
--                                its cluster hash tag, so the script touches one slot
--   ARGV[2] n             int    number of jobs; then 18 fields per job, starting at ARGV[4]:
--   ARGV[3] mode          'all' (any duplicate id: nothing is written) | 'each' (per job) |
--                         'cron': one job fired by a cron entry; 5 more fields follow the job's:
--     cron name, expected next_run_at (ms, the tick being fired), new next_run_at ('' = none),
--     overlap_policy (skip | allow | cancel_previous | enqueue), retention_ms (for cancel_previous) |
--                         'workflow': all or nothing like 'all', the jobs of one new workflow
--     (includes/workflow.lua); after the jobs' fields: workflow id, type (chain | group | batch), name,
--     m = the number of steps/jobs (the first m jobs), then one callback name (on_complete |
--     on_success | on_failure) for each of the n - m remaining jobs. A chain's steps after the first
--     and every callback are written 'pending' (in no index, not counted in the queue's depth).
--     +0 id (UUIDv7)  +1 queue  +2 type  +3 rank (lower runs first)  +4 doc (job JSON without system fields)
--     +5 max_attempts  +6 backoff spec  +7 on_exhaustion  +8 non_retryable (JSON array or '')
--     +9 timeout_ms (0 none)  +10 visibility_ms (0 server default)  +11 expires_at ms (0 none)
--     +12 scheduled_at ms (0 none)  +13 delay_ms (0 none)  +14 priority as the client gave it
--     +15 rate-limit key ('' none)  +16 rate-limit policy (see includes/ratelimit.lua; '' none)
--     +17 expires_in_ms (0 none): a relative expiry, resolved here as now + expires_in_ms
-- RETURNS
--   {'ok', now_ms, states, pressure}
--      states   {state_1, ..., state_n}: 'available', 'scheduled', 'pending' (workflow), or ('each' only) 'duplicate' when
--               a job with that id already exists, 'full' when its queue is at its depth bound
--      pressure {queue, depth, bound, warning_threshold, strategy, ...} for each bounded queue the
--               call touched, depth counted after the call
--   {'duplicate', id}                        'all' and 'workflow': that job id exists (or repeats in the
--                                            batch), or that workflow id exists; nothing was written
--   {'cron_taken'}                           'cron' only: the tick was already fired (by another pod) or
--                                            the entry changed; nothing was written
--   {'cron_skipped', previous_job_id}        'cron' only, overlap skip: the previous job is still
--                                            active; the tick was claimed (next_run_at advanced) and
--                                            cron.skipped emitted, no job written
--   {'full', queue, depth, bound, strategy}  'all', 'workflow' and 'cron' (a cron tick is claimed even so): the batch would take that queue past its
--                                            depth bound; no job was written (one
--                                            backpressure.rejected event was)
-- COST   O(log n) per job; per job three calls (EXISTS, HSET, XADD), the rest once per batch and
--        queue: one ZADD of all the queue's ready entries, one sequence reservation, the per-priority
--        counts, the index SADDs (rate-limited jobs go through their lane one by one)
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
--   (newest wins; parked lanes of the key re-open when the limits change: includes/ratelimit.lua)
--@include clock
--@include emit
--@include ready
--@include active
--@include cancel
--@include workflow

local P = ARGV[1]
local n = tonumber(ARGV[2])
local each = ARGV[3] == 'each'
local cron = nil
if ARGV[3] == 'cron' then
  local cb = 4 + n * 18
  cron = { name = ARGV[cb], expected = ARGV[cb + 1], nxt = ARGV[cb + 2], overlap = ARGV[cb + 3],
    retention = tonumber(ARGV[cb + 4]) }
end
local STRIDE = 18
local BASE = 4
local wf = nil
if ARGV[3] == 'workflow' then
  local wb = BASE + n * STRIDE
  wf = { id = ARGV[wb], type = ARGV[wb + 1], name = ARGV[wb + 2], m = tonumber(ARGV[wb + 3]), cb = {} }
  for i = wf.m, n - 1 do wf.cb[i] = ARGV[wb + 4 + i - wf.m] end
end
-- held(i): job i (0-based) waits 'pending' for its turn (workflow mode only).
local function held(i)
  return wf ~= nil and ((wf.type == 'chain' and i > 0) or i >= wf.m)
end

if wf and redis.call('EXISTS', P .. 'wf:' .. wf.id) == 1 then return {'duplicate', wf.id} end
if not each then
  local seen = {}
  for i = 0, n - 1 do
    local id = ARGV[BASE + i * STRIDE]
    if seen[id] or redis.call('EXISTS', P .. 'job:' .. id) == 1 then
      return {'duplicate', id}
    end
    seen[id] = true
  end
end

local now = now_ms()

-- A cron firing claims its tick first: only the caller that saw this next_run_at fires it.
if cron then
  local ck = P .. 'cron:' .. cron.name
  local cur = redis.call('HMGET', ck, 'next_run_at', 'last_job')
  if cur[1] ~= cron.expected then return {'cron_taken'} end
  if cron.nxt ~= '' then
    redis.call('HSET', ck, 'next_run_at', cron.nxt)
    redis.call('ZADD', P .. 'cron:due', cron.nxt, cron.name)
  else
    redis.call('HDEL', ck, 'next_run_at')
    redis.call('ZREM', P .. 'cron:due', cron.name)
  end
  redis.call('HSET', ck, 'last_run_at', now)
  redis.call('HINCRBY', ck, 'run_count', 1)
  local prev = cur[2]
  if prev and (cron.overlap == 'skip' or cron.overlap == 'cancel_previous')
    and redis.call('HGET', P .. 'job:' .. prev, 'state') == 'active' then
    if cron.overlap == 'skip' then
      emit(P, 'cron.skipped', prev, ARGV[BASE + 1], ARGV[BASE + 2], now,
        '{"cron_name":"' .. cron.name .. '","reason":"previous run still active"}')
      return {'cron_skipped', prev}
    end
    cancel_job(P, P .. 'job:' .. prev, prev, cron.retention, now)
  end
end

local states, pressure = {}, {}
local reply = {'ok', now, states, pressure}

-- Per queue, what the batch adds: ready (score, member) pairs, per-priority counts, scheduled count;
-- and, for a queue with a depth bound, its depth as the batch goes.
local qs, order = {}, {}
local function qinfo(queue)
  local c = qs[queue]
  if not c then
    local conf = redis.call('HMGET', P .. 'q:' .. queue .. ':conf', 'aging_s', 'bp_max_depth', 'bp_warn',
      'bp_strategy')
    c = { aging = conf[1] and tonumber(conf[1]), ready = {}, pri = {}, sched = 0, bound = tonumber(conf[2]),
      warn = conf[3] or '0.8', strategy = conf[4] or 'reject' }
    if c.bound then
      local depth = tonumber(redis.call('HGET', P .. 'q:' .. queue .. ':stats', 'scheduled') or '0')
      for _, v in ipairs(redis.call('HVALS', P .. 'q:' .. queue .. ':pri')) do depth = depth + tonumber(v) end
      c.depth = depth
    end
    qs[queue] = c
    order[#order + 1] = queue
  end
  return c
end

local function reject(queue, c, jtype)
  emit(P, 'backpressure.rejected', '', queue, jtype, now,
    '{"queue":"' .. queue .. '","depth":' .. c.depth .. ',"bound":' .. c.bound .. '}')
end

-- All or nothing: every bounded queue must have room for all of the batch's jobs before any is written.
if not each then
  local adds = {}
  for i = 0, n - 1 do
    local queue = ARGV[BASE + i * STRIDE + 1]
    if not held(i) then adds[queue] = (adds[queue] or 0) + 1 end
  end
  for i = 0, n - 1 do
    local queue = ARGV[BASE + i * STRIDE + 1]
    local c = qinfo(queue)
    if c.bound and adds[queue] and c.depth + adds[queue] > c.bound then
      reject(queue, c, ARGV[BASE + i * STRIDE + 2])
      return {'full', queue, c.depth, c.bound, c.strategy}
    end
  end
end

-- opt(h, field, v, none): append field = v to the HSET arguments h unless v is the "none" value.
local function opt(h, field, v, none)
  if v ~= none then
    h[#h + 1] = field
    h[#h + 1] = v
  end
end

-- Sequence numbers for the whole batch in one call (nil near the carry: next_member per job then).
local hi, lo = seq_block(P, n)

for i = 0, n - 1 do
  local b = BASE + i * STRIDE
  local id, queue, jtype, rank, doc = ARGV[b], ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3]), ARGV[b + 4]
  local jk = P .. 'job:' .. id
  local member = nil
  if hi then
    member = seq_member(hi, lo + i, id)
  end
  local c = qinfo(queue)
  if each and redis.call('EXISTS', jk) == 1 then
    states[#states + 1] = 'duplicate'
  elseif each and c.bound and c.depth >= c.bound then
    reject(queue, c, jtype)
    states[#states + 1] = 'full'
  else
    if c.bound and not held(i) then c.depth = c.depth + 1 end
    local run_at = tonumber(ARGV[b + 12])
    local delay = tonumber(ARGV[b + 13])
    if delay > 0 and now + delay > run_at then run_at = now + delay end
    local priority = ARGV[b + 14]
    local rl_key = ARGV[b + 15] ~= '' and ARGV[b + 15] or nil
    local h = {'doc', doc, 'queue', queue, 'type', jtype, 'rank', rank, 'priority', priority,
      'attempt', 0, 'max_attempts', ARGV[b + 5], 'backoff', ARGV[b + 6], 'on_exhaustion', ARGV[b + 7],
      'created_at', now, 'enqueued_at', now}
    opt(h, 'non_retryable', ARGV[b + 8], '')
    opt(h, 'timeout_ms', ARGV[b + 9], '0')
    opt(h, 'visibility_ms', ARGV[b + 10], '0')
    local expires_in = tonumber(ARGV[b + 17])
    opt(h, 'expires_at', expires_in > 0 and tostring(now + expires_in) or ARGV[b + 11], '0')
    if rl_key then
      opt(h, 'rl_key', rl_key, '')
      opt(h, 'rl', ARGV[b + 16], '')
      redis.call('ZADD', P .. 'rl:keys', 0, rl_key)
      rl_register(P, rl_key, ARGV[b + 16], now)
    end
    if wf then
      opt(h, 'wf', wf.id, '')
      opt(h, 'wf_i', wf.cb[i] or tostring(i), '')
    end
    if held(i) then
      opt(h, 'state', 'pending', '')
      opt(h, 'scheduled_at', ARGV[b + 12], '0')
      opt(h, 'hold_delay_ms', ARGV[b + 13], '0')
      redis.call('HSET', jk, unpack(h))
      emit(P, 'job.enqueued', id, queue, jtype, now, cjson.encode({state = 'pending', workflow_id = wf.id}))
      states[#states + 1] = 'pending'
    elseif run_at > now then
      opt(h, 'state', 'scheduled', '')
      opt(h, 'scheduled_at', run_at, '')
      redis.call('HSET', jk, unpack(h))
      redis.call('ZADD', P .. 'scheduled', run_at, id)
      c.sched = c.sched + 1
      emit(P, 'job.scheduled', id, queue, jtype, now, '{"scheduled_at":' .. run_at .. '}')
      states[#states + 1] = 'scheduled'
    elseif rl_key then
      -- Through its lane, one by one (lane heads, parking: see ratelimit.lua).
      opt(h, 'state', 'available', '')
      redis.call('HSET', jk, unpack(h))
      make_ready(P, jk, id, queue, rank, priority, now, rl_key, member)
      emit(P, 'job.enqueued', id, queue, jtype, now, nil)
      states[#states + 1] = 'available'
    else
      member = member or next_member(P, id)
      opt(h, 'state', 'available', '')
      opt(h, 'member', member, '')
      redis.call('HSET', jk, unpack(h))
      local r = c.ready
      r[#r + 1] = aging_score(c.aging, rank, now)
      r[#r + 1] = member
      c.pri[priority] = (c.pri[priority] or 0) + 1
      emit(P, 'job.enqueued', id, queue, jtype, now, nil)
      states[#states + 1] = 'available'
    end
  end
end

-- The batch's index writes, once per queue (ZADD in chunks to stay within Lua's unpack limit).
for _, queue in ipairs(order) do
  local c = qs[queue]
  redis.call('SADD', KEYS[1], queue)
  local r = c.ready
  if #r > 0 then
    local rk = P .. 'q:' .. queue .. ':ready'
    for s = 1, #r, 1000 do
      redis.call('ZADD', rk, unpack(r, s, math.min(s + 999, #r)))
    end
    redis.call('SADD', P .. 'ready', queue)
    local pk = P .. 'q:' .. queue .. ':pri'
    for priority, count in pairs(c.pri) do
      redis.call('HINCRBY', pk, priority, count)
    end
  end
  if c.sched > 0 then stat(P, queue, 'scheduled', c.sched) end
  if c.bound then
    pressure[#pressure + 1] = queue
    pressure[#pressure + 1] = c.depth
    pressure[#pressure + 1] = c.bound
    pressure[#pressure + 1] = c.warn
    pressure[#pressure + 1] = c.strategy
  end
end
if wf then
  local wk = P .. 'wf:' .. wf.id
  local h = {'type', wf.type, 'name', wf.name, 'state', 'running', 'total', wf.m, 'completed', 0, 'failed', 0,
    'created_at', now}
  if wf.type == 'chain' then
    h[#h + 1] = 'cursor'
    h[#h + 1] = 0
  end
  local ids = {}
  for i = 0, n - 1 do
    local id = ARGV[BASE + i * STRIDE]
    if i < wf.m then
      ids[#ids + 1] = id
    else
      h[#h + 1] = 'cb_' .. wf.cb[i]
      h[#h + 1] = id
    end
  end
  redis.call('HSET', wk, unpack(h))
  for s = 1, #ids, 1000 do
    redis.call('RPUSH', wk .. ':jobs', unpack(ids, s, math.min(s + 999, #ids)))
  end
  redis.call('ZADD', P .. 'workflows', now, wf.id)
  emit(P, 'workflow.created', '', '', '', now, cjson.encode({workflow_id = wf.id, type = wf.type, name = wf.name}))
end
if cron then
  local id = ARGV[BASE]
  redis.call('HSET', P .. 'cron:' .. cron.name, 'last_job', id)
  emit(P, 'cron.triggered', id, ARGV[BASE + 1], ARGV[BASE + 2], now, '{"cron_name":"' .. cron.name .. '"}')
end
return reply
