-- progress-1.lua: a worker reports the progress of an active job (ojs-progress); also a heartbeat for it.
--
-- KEYS
--   KEYS[1] P..'job:'..id   string the job's record (includes/record.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] progress      number(0..1)? a number in [0, 1] (clamped by the caller), or '' to keep the last one
--   ARGV[4] message       string a short text, or '' for none
--   ARGV[5] data          string structured progress as JSON, or '' for none
--   ARGV[6] default_ms    ms    lease extension for a job claimed before claims recorded 'lease_ms'
--   ARGV[7] lease_id      string the claim the worker acts for ('' = not named; see includes/lease.lua)
--   ARGV[8] attempt       int? the attempt the worker was given ('' = not named)
--   ARGV[9] worker_id     string the worker ('' = not named)
--   ARGV[10] tenant       string the tenant the request acts as ('' = none): another tenant's job is
--                                'not_found', as if it did not exist, and nothing changes
-- RETURNS
--   {'ok', now_ms, progress, lease}   progress as stored ('' when none yet); lease the new deadline, or
--                                     -1 when the lease had already lapsed (not revived)
--   {'not_found'}
--   {'ignored', state}    the job is not active: the report is dropped, silently (ojs-progress §6.1)
--   {'lease_lost', state} the request named a claim the job no longer holds; nothing changed
-- COST   O(log n) (the lease's ZADD to P..'active'), plus one event at most once a second per job
--        (the call's events are one XADD)
-- CAPS   no loop
-- CLOCK  Redis TIME
-- INVARIANTS
--   only an active job's progress fields change (progress, progress_message, progress_data,
--   progress_at, progress_claim = the claim that reported it); within one claim the number never goes
--   down (a lower report keeps the higher value); the lease and the job's rate-limit slots are
--   extended as by a heartbeat, never revived once lapsed and never past the execution timeout; no
--   index changes membership
--@include clock
--@include emit
--@include active
--@include lease

local P, id = ARG.P, ARG.id
local jk = KEYS[1]
local f = rec('HMGET', jk, 'state', 'claims', 'attempt', 'worker_id', 'lease_until', 'lease_ms',
  'visibility_ms', 'started_at', 'timeout_ms', 'rl_key', 'qrl', 'queue', 'type', 'progress', 'progress_claim',
  'progress_at', 'tslot', 'tenant')
if not f[1] then return {'not_found'} end
if ARG.tenant ~= '' and f[18] ~= ARG.tenant then return {'not_found'} end
local refusal = lease_refusal({ state = f[1], claims = f[2], attempt = f[3], worker_id = f[4] },
  { lease = ARG.lease_id, attempt = ARG.attempt, worker = ARG.worker_id })
if refusal then return refusal end
if f[1] ~= 'active' then return {'ignored', f[1]} end

local now = now_ms()
local claim = f[2] or '0'
local value = ARG.progress
local same_claim = f[15] == claim
if value == '' then
  value = same_claim and (f[14] or '') or ''
elseif same_claim and f[14] and num(f[14], 0) > tonumber(value) then
  value = f[14]
end
if value ~= '' then rec('HSET', jk, 'progress', value) else rec('HDEL', jk, 'progress') end
if ARG.message ~= '' then rec('HSET', jk, 'progress_message', ARG.message) else rec('HDEL', jk, 'progress_message') end
if ARG.data ~= '' then rec('HSET', jk, 'progress_data', ARG.data) else rec('HDEL', jk, 'progress_data') end
rec('HSET', jk, 'progress_at', now, 'progress_claim', claim)

-- A progress report is a heartbeat for this job (ojs-progress §6.3).
local lease = -1
if num(f[5], 0) > now then
  local len = num(f[6]) or num(f[7]) or tonumber(ARG.default_ms)
  lease = lease_deadline(now, len, num(f[8]), num(f[9]))
  rec('HSET', jk, 'lease_until', lease)
  redis.call('ZADD', key_active(P), lease, id)
  slots_follow(P, id, lease, f[10], f[11] and f[12], f[17])
end

-- At most one progress event a second per job (ojs-progress §6.2).
if not same_claim or now - num(f[16], 0) >= 1000 then
  ev_job_progress(P, id, f[12], f[13], now, value, f[3] or '0')
end
return {'ok', now, value, lease}
