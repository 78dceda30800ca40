-- checkpoint-delete-2.lua: a job's checkpoint is deleted (ojs-durable-execution): its next attempt
-- starts afresh, and the next save's sequence is 1 again. Deleting what is not there is not an error.
--
-- KEYS
--   KEYS[1] P..'job:'..id   string the job's record (includes/record.lua)
--   KEYS[2] P..'cp:'..id    hash   the job's checkpoint (includes/checkpoint.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] lease_id      string the claim the worker acts for ('' = not named; see includes/lease.lua)
--   ARGV[4] attempt       int? the attempt the worker was given ('' = not named)
--   ARGV[5] worker_id     string the worker ('' = not named)
--   ARGV[6] tenant        string the tenant the request acts as ('' = none): another tenant's job is
--                                'not_found', as if it did not exist, and nothing changes
-- RETURNS
--   {'ok', deleted}       deleted: 1 when there was a checkpoint, else 0
--   {'not_found'}
--   {'lease_lost', state} the request named a claim the job no longer holds: nothing changed
-- COST   O(1)
-- CAPS   no loop
-- CLOCK  none
-- INVARIANTS
--   the checkpoint and the record's marker 'cp' leave together; the job itself does not change
--@include checkpoint

local jk, ck = KEYS[1], KEYS[2]
local f, refusal = Checkpoint.job(jk, ARG.tenant, { lease = ARG.lease_id, attempt = ARG.attempt, worker = ARG.worker_id })
if not f then return refusal end
local deleted = redis.call('DEL', ck)
if f.cp then
  local w = rec_update(jk)
  if w then w.cp = nil end
end
return {'ok', deleted}
