-- What becomes of a job FETCH popped and did not start (includes/verdict.lua's verdicts other than
-- 'claim'): it ends unrun (expired: discarded; a cancelled workflow's member: cancelled; superseded:
-- completed), or its key holds it back and its on_limit decides (wait in its parked lane, be
-- rescheduled, be dropped). Each is one of FETCH's skips (fetch-1.lua MAX_SKIPS).
-- CAPS: no loop.
--@include emit
--@include ready
--@include active
--@include workflow
--@include errors
--@include ratelimit

local Unclaimed = {}

-- Unclaimed.finish(P, jk, id, queue, state, fields, now, retention): the popped job ends without being
-- claimed (state discarded, cancelled, or completed as superseded; fields: more of its record's), kept
-- retention ms (0: forever); its workflow advances. The caller wrote its event.
function Unclaimed.finish(P, jk, id, queue, state, fields, now, retention)
  rec('HSET', jk, 'state', state, state .. '_at', now, unpack(fields))
  rec('HDEL', jk, 'member')
  stat(P, queue, state, 1)
  finish(P, jk, id, retention, now)
  local w = rec('HMGET', jk, 'wf', 'wf_i')
  wf_job_ended(P, w[1], w[2], 'failed', nil, now, retention)
end

-- Unclaimed.discard(P, jk, id, queue, code, message, now, retention): it ends discarded with the error
-- the server made (code, message).
function Unclaimed.discard(P, jk, id, queue, code, message, now, retention)
  Unclaimed.finish(P, jk, id, queue, 'discarded', {'error', error_entry(error_json(code, message))}, now,
    retention)
end

-- Unclaimed.held(P, jk, id, f, queue, q, e, member, score, now, retention, strategy, limit, current,
-- wake): its key holds it back (Verdict.job 'held', with RateKey.check's answer; e its key's limits; it
-- was popped from q as member with score); its on_limit decides: wait in its lane, parked until wake
-- (-1: until a slot of the key is released), be rescheduled for wake, or be dropped.
function Unclaimed.held(P, jk, id, f, queue, q, e, member, score, now, retention, strategy, limit, current,
                        wake)
  local key, jtype = f.rl_key, f.type or ''
  -- One rate_limit.exceeded per blocking episode, not one per skipped job.
  if redis.call('HSETNX', key_rl_state(P, key), 'blocked_since', now) == 1 then
    redis.call('HSET', key_rl_state(P, key), 'strategy', strategy, 'until', wake)
    incr(key_rl_stats(P, key), 'exceeded_' .. strategy, 1)
    ev_rate_limit_exceeded(P, id, queue, jtype, now, key, strategy, limit, current)
  end
  if e.on_limit == 'drop' then
    not_available(P, queue, f.priority)
    ev_rate_limit_dropped(P, id, queue, jtype, now, key, strategy)
    Unclaimed.discard(P, jk, id, queue, 'rate_limited', 'dropped: rate limit ' .. key .. ' reached (on_limit drop)',
      now, retention)
    -- A dropped job does not park its lane: the next job of the lane faces the limit under its own
    -- on_limit (a waiting job then parks the lane; a dropping one is dropped in turn).
    Lane.open(P, q, key, true)
    if wake >= 0 then redis.call('ZADD', key_rl_wake(P), wake, q .. '\n' .. key) end
  elseif e.on_limit == 'reschedule' and wake > now then
    not_available(P, queue, f.priority)
    rec('HDEL', jk, 'member')
    rec('HSET', jk, 'state', 'scheduled', 'scheduled_at', wake)
    redis.call('ZADD', key_scheduled(P), wake, id)
    stat(P, queue, 'scheduled', 1)
    ev_job_scheduled(P, id, queue, jtype, now, wake, 'rate_limit')
    Lane.park(P, q, key, nil, nil, wake, strategy, e.pool_size and e.floor, e.pool_queue, now)
  else
    Lane.park(P, q, key, member, score, wake, strategy, e.pool_size and e.floor, e.pool_queue, now)
  end
end

-- Unclaimed.apply(P, kind, jk, id, f, queue, q, e, member, score, now, retention, a, limit, current, wake):
-- the popped job's verdict `kind` (with Verdict.job's other answers: e, then a, limit, current, wake) was
-- not 'claim': the job ends unrun, or is held back (Unclaimed.held). An ended job's lane re-opens.
function Unclaimed.apply(P, kind, jk, id, f, queue, q, e, member, score, now, retention, a, limit, current,
                         wake)
  if kind == 'held' then
    return Unclaimed.held(P, jk, id, f, queue, q, e, member, score, now, retention, a, limit, current, wake)
  end
  local jtype = f.type or ''
  not_available(P, queue, f.priority)
  if kind == 'expired' then
    ev_job_expired(P, id, queue, jtype, now)
    Unclaimed.discard(P, jk, id, queue, 'expired', EXPIRED_ERROR, now, retention)
  elseif kind == 'workflow_cancelled' then
    ev_job_cancelled(P, id, queue, jtype, now, 'available', 'workflow cancelled')
    Unclaimed.finish(P, jk, id, queue, 'cancelled', {}, now, retention)
  else
    -- MediaWiki's deduplication: a newer run made this one pointless; it completes unrun.
    local why = cjson.encode(a)
    ev_job_superseded(P, id, queue, jtype, now, why)
    Unclaimed.finish(P, jk, id, queue, 'completed', {'superseded', why}, now, retention)
  end
  if f.rl_key then Lane.open(P, q, f.rl_key, true) end
end
