-- The verdict on a job at the head of a ready set: what FETCH does with it when it pops it, decided here
-- once, for FETCH's claim loop (fetch-1.lua claim_from: pop, verdict, one small action) and for explain
-- (job-explain-1.lua, which says what the next FETCH would do), so the two cannot disagree.
--
-- Before any job is popped, a queue and a tenant of it must be served at all (includes/gates.lua, also
-- called by both): the queue is not paused, not being re-scored, under its queue-level limits, and the
-- tenant under its concurrency there; a queue's fair share picks the tenant (includes/tenant.lua).
-- Then each popped job gets one verdict, in this order:
--   'expired'             its expires_at has passed: discarded, never run
--   'workflow_cancelled'  a member of a cancelled workflow that the sweep has not reached: cancelled
--   'superseded'          a newer run made it pointless (options.dedup, options.root_job;
--                         includes/supersede.lua): completed unrun
--   'held'                its rate-limit key may not start one more now (a dynamic block, the key's
--                         concurrency, its pool, its window, its throttle, each possibly an operator's
--                         override or an adaptive step: includes/ratelimit.lua RateKey.check): its
--                         on_limit decides (wait in its parked lane, reschedule, drop)
--   'claim'               it starts
-- A job with no rate limit, workflow, expiry or deduplication is a 'claim' with no command.
-- CAPS: Verdict.job has no loop; Verdict.owed_now (explain only) judges at most POOL_LOOK = 100 lanes.
--@include ratelimit
--@include supersede
--@include gates

-- Owing lanes of a pool Verdict.owed_now judges.
local POOL_LOOK = 100

local Verdict = {}

-- Verdict.job(P, id, f, q, l, now): the verdict on job id, whose record's map is f (includes/record.lua),
-- popped from (or first in) the ready set of q (its queue, or its tenant's sub-queue of it), whose
-- queue's settings are l (gates.lua Gate.settings). Returns kind, e, and by kind:
--   'held'        strategy, limit, current, wake (RateKey.check's)
--   'superseded'  the reason (supersede.lua superseded_by)
--   'claim'       the job's workflow's state (false when it has none, or its workflow is gone)
-- e: its key's limits in force (Policy.effective, with its pool learned: Pool.learn), nil for a job
-- without a key; every kind gives it, so that the caller can re-open or re-sync the key's lane.
-- Reads only (the window's pruning aside, which changes no answer).
function Verdict.job(P, id, f, q, l, now)
  local key, e = f.rl_key, nil
  if key then
    e = Policy.effective(P, key, Policy.of(P, key, f.rl))
    Pool.learn(P, e, q, l)
  end
  if num(f.expires_at, now + 1) <= now then return 'expired', e end
  local wf_state = f.wf and redis.call('HGET', key_workflow(P, f.wf), 'state')
  if wf_state == 'cancelled' then return 'workflow_cancelled', e end
  if f.dedup or f.root then
    local why = superseded_by(P, id, f)
    if why then return 'superseded', e, why end
  end
  if key then
    local strategy, limit, current, wake = RateKey.check(P, key, e, now)
    if strategy then return 'held', e, strategy, limit, current, wake end
  end
  return 'claim', e, wf_state
end

-- Verdict.owed_now(P, e, now): of the floors owed in the pool of a key's limits e (learned by Pool.learn),
-- those FETCH would still find owed after meeting each owing lane's next job in the same call (read only,
-- for explain): a lane whose head would start, or waits for its key's own concurrency or the pool (still
-- owed: rl_pool.lua Pool.owes), keeps its part; one whose head its window, throttle or a dynamic block
-- holds back parks and owes nothing, and one whose head ends unrun owes nothing unless its lane holds
-- more jobs. The first POOL_LOOK lanes are judged; any past them stay owed.
function Verdict.owed_now(P, e, now)
  local owed = e.pool_want
  local parts = redis.call('HGETALL', key_queue_want(P, e.pool_queue))
  local settings = {}
  for i = 1, math.min(#parts, 2 * POOL_LOOK), 2 do
    local q, key = string.match(parts[i], '^(.-)\n(.*)$')
    local head = q and redis.call('HGET', key_queue_heads(P, q), key)
    local hid = head and member_id(head)
    local hf = hid and rec_load(key_job(P, hid)).f
    if hf then
      local queue = Tenant.base_queue(q)
      settings[queue] = settings[queue] or Gate.settings(P, queue)
      local kind, _, strategy = Verdict.job(P, hid, hf, q, settings[queue], now)
      local owes = kind == 'claim' or (kind == 'held' and (strategy == 'concurrency' or strategy == 'pool'))
        or (kind ~= 'held' and redis.call('ZCARD', key_queue_lane(P, q, key)) > 0)
      if not owes then owed = owed - (whole(parts[i + 1]) or 0) end
    end
  end
  return math.max(owed, 0)
end
