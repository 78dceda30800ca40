-- Checkpoints (ojs-durable-execution): one per job at most, the hash P..'cp:'..id beside the job's
-- record, with fields state (JSON text, as the worker sent it: never decoded here), seq (the saves
-- since it was last deleted), at (ms of the last save), and, when the SDKs send them, meta (a JSON
-- object as text) and step (their step_index). The record holds the marker 'cp' = '1' while the
-- checkpoint exists, so that what reads a job knows without a lookup whether it has one.
--
-- It lives and dies with its job: an ending gives it the record's retention (includes/active.lua
-- finish), deleting a dead-lettered job deletes it (dead-delete-1.lua). FETCH hands it to the attempt it
-- starts (Checkpoint.job_reply), so a retried job resumes from it.
--
-- Costs per FETCH: a job without a checkpoint, one table lookup; with one, an HMGET of it.
-- CAPS: no loop.
--@include workflow
--@include lease
local Checkpoint = {}

-- Checkpoint.job(jk, tenant, want): the job's record map when the request may reach its checkpoint,
-- else nil and the reply: {'not_found'} for no job or another tenant's than `tenant` ('' = any), as if
-- it did not exist; lease_refusal's for a claim (want, includes/lease.lua) the job no longer holds.
function Checkpoint.job(jk, tenant, want)
  local f = rec_map(jk)
  if not f or (tenant ~= '' and f.tenant ~= tenant) then return nil, {'not_found'} end
  local refusal = want and lease_refusal(f, want)
  if refusal then return nil, refusal end
  return f
end

-- The states in which a job takes no new checkpoint: it has ended.
Checkpoint.ended = { completed = true, cancelled = true, discarded = true }

-- Checkpoint.put(ck, state, meta, step, now): the checkpoint at ck is replaced; returns its sequence.
function Checkpoint.put(ck, state, meta, step, now)
  redis.call('HSET', ck, 'state', state, 'at', now)
  if meta ~= '' then redis.call('HSET', ck, 'meta', meta) else redis.call('HDEL', ck, 'meta') end
  if step ~= '' then redis.call('HSET', ck, 'step', step) else redis.call('HDEL', ck, 'step') end
  return redis.call('HINCRBY', ck, 'seq', 1)
end

-- Checkpoint.read(ck): {state, seq, at, meta, step} (meta and step false when absent), or false.
function Checkpoint.read(ck)
  local c = redis.call('HMGET', ck, 'state', 'seq', 'at', 'meta', 'step')
  if not c[1] then return false end
  return c
end

-- Checkpoint.job_reply(P, id, jk): a job as FETCH returns it: wf_job_reply's, and for a job with a
-- checkpoint {record, parent_results or false, checkpoint} (Checkpoint.read's reply).
function Checkpoint.job_reply(P, id, jk)
  local job = wf_job_reply(P, jk)
  if not (rec_map(jk) or {}).cp then return job end
  local c = Checkpoint.read(key_checkpoint(P, id))
  if not c then return job end
  if type(job) == 'table' then return {job[1], job[2], c} end
  return {job, false, c}
end
