-- checkpoint-save-2.lua: a worker saves a job's checkpoint (ojs-durable-execution): the state the job's
-- next attempt resumes from. Only the latest is kept; its sequence counts the saves since the last
-- delete.
--
-- KEYS
--   KEYS[1] P..'job:'..id   string the job's record (includes/record.lua)
--   KEYS[2] P..'cp:'..id    hash   the job's checkpoint (includes/checkpoint.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] state         string the checkpoint's state, JSON text (the server checked and bounded it)
--   ARGV[4] meta          string the SDKs' metadata, a JSON object as text, or '' for none
--   ARGV[5] step          int(0..)? the SDKs' step_index, or '' for none
--   ARGV[6] lease_id      string the claim the worker acts for ('' = not named; see includes/lease.lua)
--   ARGV[7] attempt       int? the attempt the worker was given ('' = not named)
--   ARGV[8] worker_id     string the worker ('' = not named)
--   ARGV[9] tenant        string the tenant the request acts as ('' = none): another tenant's job is
--                                'not_found', as if it did not exist, and nothing changes
-- RETURNS
--   {'ok', sequence, now_ms, attempt}   attempt: the job's attempt now ('0' before its first claim)
--   {'not_found'}
--   {'state', state}      the job has ended (completed, cancelled, discarded): nothing changed
--   {'lease_lost', state} the request named a claim the job no longer holds: nothing changed
-- COST   O(1): one HSET and one HINCRBY of the checkpoint, the record re-packed once (its marker)
-- CAPS   no loop
-- CLOCK  Redis TIME
-- INVARIANTS
--   a checkpoint exists only beside its job, whose record then holds the marker 'cp'; a job that has
--   ended takes no checkpoint; a request naming a claim saves only while the job is active under it, so
--   a worker whose lease lapsed cannot overwrite the next holder's checkpoint
--@include clock
--@include emit
--@include checkpoint

local jk, ck = KEYS[1], KEYS[2]
local f, refusal = Checkpoint.job(jk, ARG.tenant, { lease = ARG.lease_id, attempt = ARG.attempt, worker = ARG.worker_id })
if not f then return refusal end
if Checkpoint.ended[f.state] then return {'state', f.state} end

local now = now_ms()
local seq = Checkpoint.put(ck, ARG.state, ARG.meta, ARG.step, now)
local w = rec_update(jk)
if w then w.cp = '1' end
ev_job_checkpointed(ARG.P, ARG.id, f.queue or '', f.type or '', now, seq, f.attempt or '0')
return {'ok', seq, now, f.attempt or '0'}
