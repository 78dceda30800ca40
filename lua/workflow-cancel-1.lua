-- workflow-cancel-1.lua: cancel a running workflow and every job of it that has not ended, in bounded
-- steps (includes/workflow.lua, Sweeps).
--
-- KEYS
--   KEYS[1] P..'wf:'..W   hash   the workflow (includes/workflow.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] W             string workflow id
--   ARGV[3] retention_ms  ms    retention of the cancelled jobs' hashes and of the workflow; 0 = forever
--   ARGV[4] mode          'cancel'|'step' cancel: the workflow becomes cancelled and the first step of ending
--                                its members runs; 'step': the next step of that (the caller calls
--                                again while done is 0)
-- RETURNS
--   {'ok', now_ms, cancelled, done}   cancelled = how many jobs this call cancelled (pending ones
--                                     included); done = 1 when every member has ended, else 0
--   {'not_found'}
--   {'state', state}           'cancel' of a workflow that already ended (completed, failed or cancelled)
-- COST   O(k) for the k members one step visits
-- CAPS   a step visits at most WF_SWEEP = 500 members (and with the last of them at most 3 batch
--        callbacks); wf_close drops at most 3 pending callbacks and trims at most WF_TRIM = 100 expired
--        workflows from the listing index; the promote timer finishes a sweep a caller left
-- CLOCK  Redis TIME
-- INVARIANTS
--   running -> cancelled first, so the jobs cancelled here do not advance it (wf_job_ended ignores a
--   workflow that is not running); each job leaves its index as DELETE /jobs/{id} would take it out
--   (includes/cancel.lua), pending ones end cancelled; jobs already ended keep their state; until its
--   step comes, a member that FETCH pops is cancelled instead of claimed, so no job of a cancelled
--   workflow starts; an active job's worker learns it from its next heartbeat and its ACK/NACK is
--   refused
--@include clock
--@include cancel

local P, W, retention = ARG.P, ARG.W, tonumber(ARG.retention_ms)
local wk = KEYS[1]
local now = now_ms()
if ARG.mode == 'step' then
  local done, ended = wf_sweep(P, W, now, retention)
  return {'ok', now, ended, done and 1 or 0}
end
local state = redis.call('HGET', wk, 'state')
if not state then return {'not_found'} end
if state ~= 'running' then return {'state', state} end
-- A batch's pending callbacks are dropped by wf_close itself; the sweep finds them ended.
local dropped = wf_close(P, W, wk, 'cancelled', now, retention)
wf_sweep_start(P, W, wk, 'cancel', 0)
local done, ended = wf_sweep(P, W, now, retention)
return {'ok', now, dropped + ended, done and 1 or 0}
