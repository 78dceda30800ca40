-- ack_job(P, jk, id, result, retention_ms, now, want): an active job succeeded (fetch-1.lua, for an ACK
-- when a worker acks its last job and asks for the next one in the same call). Returns the script reply:
--   {'ok', now_ms, attempt, queue, type} | {'not_found'} | {'state', state} | {'lease_lost', state}
-- want names the claim the worker acts for (see lease.lua: lease, attempt, worker; '' = not named);
-- a claim the job no longer holds is refused with 'lease_lost' and nothing changes.
-- active -> completed only; the current 'error' is cleared ('errors' history stays); the job leaves
-- P..'active', the queue's active counter and its rate-limit slots (re-opening parked lanes) at once; an
-- ACK for a job already taken back (lease lapsed and requeued) is refused, never applied twice. A lease
-- that lapsed but was not yet taken back is still the worker's: its ACK completes the job. A workflow
-- job advances its workflow in the same call (includes/workflow.lua).
--@include emit
--@include active
--@include lease
--@include workflow

local function ack_job(P, jk, id, result, retention_ms, now, want)
  local f = rec('HMGET', jk, 'state', 'queue', 'type', 'attempt', 'started_at', 'rl_key', 'qrl', 'claims',
    'worker_id', 'wf', 'wf_i')
  if not f[1] then return {'not_found'} end
  local refused = lease_refusal({ state = f[1], claims = f[8], attempt = f[4], worker = f[9] }, want)
  if refused then return refused end
  if f[1] ~= 'active' then return {'state', f[1]} end
  leave_active(P, jk, id, f[2], now, {f[6], f[7]}, 'error')
  if result ~= '' then
    rec('HSET', jk, 'state', 'completed', 'completed_at', now, 'result', result)
  else
    rec('HSET', jk, 'state', 'completed', 'completed_at', now)
  end
  stat(P, f[2], 'completed', 1)
  emit(P, 'job.completed', id, f[2], f[3], now,
    '{"attempt":' .. f[4] .. ',"duration_ms":' .. (now - (tonumber(f[5]) or now)) .. '}')
  finish(P, jk, id, retention_ms)
  wf_job_ended(P, f[10], f[11], 'completed', result, now, retention_ms)
  return {'ok', now, tonumber(f[4]), f[2], f[3]}
end
