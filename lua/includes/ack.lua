-- ack_job(P, jk, id, result, retention_ms, now, want): an active job succeeded (fetch-1.lua, for an ACK
-- when a worker acks its last job and asks for the next one in the same call). Returns the script reply:
--   {'ok', now_ms, attempt, queue, type} | {'not_found'} | {'state', state} | {'lease_lost', state}
-- want names the claim the worker acts for (see lease.lua: lease, attempt, worker; '' = not named);
-- a claim the job no longer holds is refused with 'lease_lost' and nothing changes. want.tenant: the
-- tenant the request acts as ('' = none); another tenant's job is 'not_found', as if it did not exist
-- (the record is already loaded here: the check costs the ACK nothing). want.used: the
-- units the job really used ('' = its cost), which correct its rate-limit window entry (RateKey.used). The
-- success of a job whose own and key's policies are adaptive counts toward the key's step up
-- (Adapt.up). Its release re-computes what a key with a floor owes its pools, and a slot of a queue
-- with a concurrency re-opens the lanes its pool holds back (active.lua leave_active; ratelimit.lua
-- "Burstable concurrency").
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
  -- The record's own map (includes/record.lua rec_map): the fields read here are the ones no write below
  -- changes (queue, type, attempt, started_at, wf, wf_i).
  local f = rec_map(jk)
  if not (f and f.state) then return {'not_found'} end
  if want.tenant ~= '' and f.tenant ~= want.tenant then return {'not_found'} end
  local refused = lease_refusal(f, want)
  if refused then return refused end
  if f.state ~= 'active' then return {'state', f.state} end
  local queue, jtype, attempt = f.queue, f.type, f.attempt
  if want.used and want.used ~= '' and f.rl_key then
    local _, units = Policy.units_held(f.rl_units)
    RateKey.used(P, f.rl_key, id, f.claims, units, tonumber(want.used), now)
  end
  local adaptive = Adapt.of(P, f.rl_key, f.rl)
  if adaptive then Adapt.up(P, f.rl_key, adaptive, now, id, queue, jtype) end
  leave_active(P, jk, id, queue, now, 'error')
  local w = rec_update(jk)
  w.state, w.completed_at = 'completed', text(now)
  if result ~= '' then w.result = result end
  stat(P, queue, 'completed', 1)
  ev_job_completed(P, id, queue, jtype, now, attempt, now - num(f.started_at, now))
  finish(P, jk, id, retention_ms, now)
  wf_job_ended(P, f.wf, f.wf_i, 'completed', result, now, retention_ms)
  return {'ok', now, tonumber(attempt), queue, jtype}
end
