-- cancel_job(P, jk, id, retention_ms, now): cancel a job that has not finished (DELETE /jobs/{id}, and a
-- cron firing with overlap_policy cancel_previous). Returns {'ok', now, previous_state} |
-- {'not_found'} | {'state', state} (already completed, cancelled or discarded).
-- available|scheduled|retryable|active|pending -> cancelled (a workflow job's workflow counts it as
-- failed: a chain stops; a batch callback that has not fired yet is only taken out of the batch, which
-- runs on); the job leaves whichever index held it (ready set,
-- rate-limit lane, P..'scheduled', P..'active' with its rate-limit slots), and a key left with no lane
-- and no holder goes idle (includes/ratelimit.lua "Idle keys"). An active job's worker
-- learns it from its next heartbeat, and its ACK/NACK is refused.
--@include emit
--@include ready
--@include active
--@include workflow

local function cancel_job(P, jk, id, retention_ms, now)
  local f = rec('HMGET', jk, 'state', 'queue', 'type', 'wf', 'wf_i', 'rl_key')
  local state, queue = f[1], f[2]
  if not state then return {'not_found'} end
  if state == 'available' then
    unready(P, jk, queue)
  elseif state == 'scheduled' or state == 'retryable' then
    redis.call('ZREM', key_scheduled(P), id)
    stat(P, queue, 'scheduled', -1)
    -- Its key may have no lane and no holder left (a key whose only jobs were scheduled): idle.
    if f[6] then Lane.maybe_idle(P, f[6]) end
  elseif state == 'active' then
    leave_active(P, jk, id, queue, now)
  elseif state ~= 'pending' then
    return {'state', state}
  end
  rec('HSET', jk, 'state', 'cancelled', 'cancelled_at', now)
  stat(P, queue, 'cancelled', 1)
  ev_job_cancelled(P, id, queue, f[3], now, state, nil)
  finish(P, jk, id, retention_ms, now)
  wf_job_ended(P, f[4], f[5], 'failed', nil, now, retention_ms)
  return {'ok', now, state}
end

-- A sweep of a cancelled workflow (includes/workflow.lua) cancels its members with this very code.
WF_CANCEL_JOB = cancel_job
