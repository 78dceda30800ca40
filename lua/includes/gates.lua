-- Gates: the queue-level rules that decide whether FETCH may take anything from a queue now, written
-- once and called both by fetch-1.lua (to decide) and by job-explain-1.lua (to say what holds a job
-- back and until when). The per-key rules are ratelimit.lua's (Policy.of, Policy.effective, RateKey.check), the
-- fair share's turn order is tenant.lua's (Tenant.next, Tenant.turn); both scripts call those too.
--
-- A queue is served when it is not paused (P..'paused'), is not being re-scored for an aging change
-- (conf field rs_phase, includes/rescore.lua), and its queue-level limits (conf fields rl_concurrency,
-- rl_rate_limit, rl_rate_period; counters P..'q:'..Q..':rl:active' by lease deadline and
-- P..'q:'..Q..':rl:win' by start time) have room; a tenant's jobs, while the tenant is under its
-- concurrency in the queue (its tenancy setting; includes/tenant.lua).
-- CAPS: no loop.
--@include ratelimit
--@include tenant

local Gate = {}

-- Gate.conf_count(v): a setting's count: nil when absent, false when it is no whole number (text.lua whole).
function Gate.conf_count(v)
  if not v then return nil end
  return whole(v) or false
end

-- Gate.paused(P, queue): the queue is paused (POST /queues/{q}/pause).
function Gate.paused(P, queue)
  return redis.call('SISMEMBER', key_paused(P), queue) == 1
end

-- Gate.settings(P, queue): the queue's settings FETCH reads before taking from it (FETCH reads them
-- once per call: no operation of fetch-1.lua changes them). `tenants` is set once the queue held a
-- tenant's job; `tenancy` is the queue's tenancy setting, decoded (its own weights; includes/tenant.lua).
function Gate.settings(P, queue)
  local c = redis.call('HMGET', key_queue_conf(P, queue), 'rl_concurrency', 'rl_rate_limit', 'rl_rate_period',
    'rs_phase', 'tenants', 'tenancy', 'pool_gen')
  local conc, rate_limit, rate_period = Gate.conf_count(c[1]), Gate.conf_count(c[2]), Gate.conf_count(c[3])
  if conc == false or rate_limit == false or rate_period == false then
    -- A limit something other than this library wrote as no count: the queue is held (a limit of 0)
    -- rather than served past a limit it may have had (issue 40).
    redis.log(redis.LOG_WARNING, 'ojs: queue ' .. queue .. ' has a rate limit setting that is no count; held')
    conc, rate_limit, rate_period = 0, nil, nil
  end
  return { conc = conc, rate_limit = rate_limit, rate_period = rate_period, rescoring = c[4],
    tenants = c[5], tenancy = Tenant.decode_tenancy(c[6]), pool_gen = c[7] or '' }
end

-- Gate.slots_full(ak, conc, now, wake_too): the holders of zset ak (job id -> lease deadline; a lapsed one no
-- longer counts) fill all conc slots: their count and, only when wake_too, the earliest lease deadline
-- among them (-1 when not asked); nil while a slot is free.
function Gate.slots_full(ak, conc, now, wake_too)
  local n = redis.call('ZCOUNT', ak, '(' .. now, '+inf')
  if n < conc then return nil end
  local wake = -1
  if wake_too then
    local first = redis.call('ZRANGE', ak, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
    if first[2] then wake = tonumber(first[2]) end
  end
  return n, wake
end

-- Gate.queue(P, queue, l, now, wake_too): may FETCH take a job from the queue now, under its settings l
-- (Gate.settings)? nil when it may; else the gate that stops it ('rescoring', 'queue_concurrency',
-- 'queue_rate'), its limit, the current count and, only when wake_too (FETCH does not ask: it skips the
-- queue and looks again at its next call), when it may open (ms; -1 when unknown): the earliest lease
-- deadline of a slot holder, or when the oldest start slides out of the window. The window's entries
-- that slid out are pruned (ZREMRANGEBYSCORE), as FETCH always did.
function Gate.queue(P, queue, l, now, wake_too)
  -- Its waiting jobs are being re-scored for a new aging setting (includes/rescore.lua): not served
  -- until every one has its new score.
  if l.rescoring then return 'rescoring', -1, -1, -1 end
  local conc, rlim, rper = l.conc, l.rate_limit, l.rate_period
  if conc then
    local n, wake = Gate.slots_full(key_queue_rl_active(P, queue), conc, now, wake_too)
    if n then return 'queue_concurrency', conc, n, wake end
  end
  if rlim and rper then
    local wk = key_queue_rl_win(P, queue)
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', now - rper)
    local n = redis.call('ZCARD', wk)
    if n >= rlim then
      local wake = -1
      if wake_too then
        local oldest = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
        if oldest[2] then wake = tonumber(oldest[2]) + rper end
      end
      return 'queue_rate', rlim, n, wake
    end
  end
  return nil
end

-- Gate.tenant(P, queue, tenant, l, now, wake_too): may FETCH take a job of the tenant from the queue now,
-- under the queue's settings l? nil when it may (always, for a tenant without a cap there: no command);
-- else 'tenant_concurrency', the tenant's cap, its holders now and, when wake_too, the earliest lease
-- deadline among them (includes/tenant.lua, "A tenant's concurrency").
function Gate.tenant(P, queue, tenant, l, now, wake_too)
  local cap = Tenant.cap(l.tenancy, tenant)
  if not cap then return nil end
  local n, wake = Gate.slots_full(key_queue_rl_active(P, Tenant.sub_queue(queue, tenant)), cap, now, wake_too)
  if n then return 'tenant_concurrency', cap, n, wake end
  return nil
end

-- Gate.claimed(P, queue, l, id, claim, lease, now): FETCH claimed job id (claim number `claim`) from the
-- queue under its settings l, with a lease until `lease`: it holds one of the queue's slots and enters
-- its window, while the queue has those limits. True when it took either (the caller marks the job's
-- record 'qrl', so that its end gives them back).
function Gate.claimed(P, queue, l, id, claim, lease, now)
  if not (l.conc or l.rate_limit) then return false end
  if l.conc then redis.call('ZADD', key_queue_rl_active(P, queue), lease, id) end
  if l.rate_limit and l.rate_period then
    redis.call('ZADD', key_queue_rl_win(P, queue), now, id .. ':' .. claim)
    redis.call('PEXPIRE', key_queue_rl_win(P, queue), l.rate_period)
  end
  return true
end
