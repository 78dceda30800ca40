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
-- CAPS: no loop.
--@include ratelimit
--@include supersede

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
