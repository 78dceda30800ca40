-- workflow-cancel-1.lua: cancel a running workflow and every job of it that has not ended.
--
-- KEYS
--   KEYS[1] P..'wf:'..W   hash   the workflow (includes/workflow.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] W             string workflow id
--   ARGV[3] retention_ms  int    retention of the cancelled jobs' hashes and of the workflow; 0 = forever
-- RETURNS
--   {'ok', now_ms, cancelled}   cancelled = how many jobs were cancelled (pending ones included)
--   {'not_found'}
--   {'state', state}           the workflow already ended (completed, failed or cancelled)
-- COST   O(jobs of the workflow): every job is visited once (cancel_job for those waiting or running;
--        at most 10,000 steps or jobs and 3 callbacks); wf_close drops at most 3 pending callbacks and
--        trims at most 100 expired workflows from the listing index (includes/workflow.lua WF_TRIM)
-- CLOCK  Redis TIME
-- INVARIANTS
--   running -> cancelled first, so the jobs cancelled here do not advance it (wf_job_ended ignores a
--   workflow that is not running); each job leaves its index as DELETE /jobs/{id} would take it out
--   (includes/cancel.lua), pending ones end cancelled (a batch's pending callbacks by wf_close, with
--   reason 'workflow cancelled'); jobs already ended keep their state; an active
--   job's worker learns it from its next heartbeat and its ACK/NACK is refused
--@include clock
--@include cancel

local P, W, retention = ARGV[1], ARGV[2], tonumber(ARGV[3])
local wk = KEYS[1]
local w = redis.call('HMGET', wk, 'state', 'cb_on_complete', 'cb_on_success', 'cb_on_failure')
if not w[1] then return {'not_found'} end
if w[1] ~= 'running' then return {'state', w[1]} end
local now = now_ms()
-- A batch's pending callbacks are dropped by wf_close itself; the loop below finds them ended.
local cancelled = wf_close(P, W, wk, 'cancelled', now, retention)
local ids = redis.call('LRANGE', key_workflow_jobs(P, W), 0, -1)
for i = 2, 4 do
  if w[i] then ids[#ids + 1] = w[i] end
end
for _, id in ipairs(ids) do
  if cancel_job(P, key_job(P, id), id, retention, now)[1] == 'ok' then cancelled = cancelled + 1 end
end
return {'ok', now, cancelled}
