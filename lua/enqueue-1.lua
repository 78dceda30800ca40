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
--   ARGV[3] mode          'all' (any duplicate id: nothing is written) | 'each' (per job)
--     +0 id (UUIDv7)  +1 queue  +2 type  +3 rank (lower runs first)  +4 doc (job JSON without system fields)
--     +5 max_attempts  +6 backoff spec  +7 on_exhaustion  +8 non_retryable (JSON array or '')
--     +9 timeout_ms (0 none)  +10 visibility_ms (0 server default)  +11 expires_at ms (0 none)
--     +12 scheduled_at ms (0 none)  +13 delay_ms (0 none)  +14 priority as the client gave it
--     +15 rate-limit key ('' none)  +16 rate-limit policy (see includes/ratelimit.lua; '' none)
--     +17 expires_in_ms (0 none): a relative expiry, resolved here as now + expires_in_ms
-- RETURNS
--   {'ok', now_ms, state_1, ..., state_n}   state_i is 'available', 'scheduled', or ('each' only)
--                                            'duplicate' when a job with that id already exists
--   {'duplicate', id}                        'all' only: that id exists (or repeats in the batch);
--                                            nothing was written
-- COST   O(log n) per job; per job three calls (EXISTS, HSET, XADD), the rest once per batch and
--        queue: one ZADD of all the queue's ready entries, one sequence reservation, the per-priority
--        counts, the index SADDs (rate-limited jobs go through their lane one by one)
-- CLOCK  Redis TIME
-- INVARIANTS
--   each new job is in exactly one index: its queue's ready set or its rate-limit lane (available), or
--   P..'scheduled' (scheduled); FIFO within a priority follows the order of the batch; 'all' writes no
--   job unless every id in the batch is new; a job with a rate-limit key makes its policy the key's
--   (newest wins; parked lanes of the key re-open when the limits change: includes/ratelimit.lua)
--@include clock
--@include emit
--@include ready
--@include active

local P = ARGV[1]
local n = tonumber(ARGV[2])
local each = ARGV[3] == 'each'
local STRIDE = 18
local BASE = 4

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
local reply = {'ok', now}

-- Per queue, what the batch adds: ready (score, member) pairs, per-priority counts, scheduled count.
local qs, order = {}, {}
local function qinfo(queue)
  local c = qs[queue]
  if not c then
    local aging = redis.call('HGET', P .. 'q:' .. queue .. ':conf', 'aging_s')
    c = { aging = aging and tonumber(aging), ready = {}, pri = {}, sched = 0 }
    qs[queue] = c
    order[#order + 1] = queue
  end
  return c
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
  if each and redis.call('EXISTS', jk) == 1 then
    reply[#reply + 1] = 'duplicate'
  else
    local c = qinfo(queue)
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
    if run_at > now then
      opt(h, 'state', 'scheduled', '')
      opt(h, 'scheduled_at', run_at, '')
      redis.call('HSET', jk, unpack(h))
      redis.call('ZADD', P .. 'scheduled', run_at, id)
      c.sched = c.sched + 1
      emit(P, 'job.scheduled', id, queue, jtype, now, '{"scheduled_at":' .. run_at .. '}')
      reply[#reply + 1] = 'scheduled'
    elseif rl_key then
      -- Through its lane, one by one (lane heads, parking: see ratelimit.lua).
      opt(h, 'state', 'available', '')
      redis.call('HSET', jk, unpack(h))
      make_ready(P, jk, id, queue, rank, priority, now, rl_key, member)
      emit(P, 'job.enqueued', id, queue, jtype, now, nil)
      reply[#reply + 1] = 'available'
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
      reply[#reply + 1] = 'available'
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
end
return reply
