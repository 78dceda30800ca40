-- workflow-get-1.lua: read one workflow with the state of its jobs, in one consistent snapshot.
--
-- KEYS
--   KEYS[1] P..'wf:'..W   hash   the workflow (includes/workflow.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] W             string workflow id
--   ARGV[3] limit         int(0..100000) most member jobs to describe (the first ones, in order)
-- RETURNS
--   {'ok', now_ms, fields, jobs, callbacks}
--      fields     the workflow hash as a flat field/value array; a workflow created before the hash
--                 kept its 'tenant' (workflow-create-1.lua) gets its first job's, when it has one
--      jobs       {id, type, state, queue, ...} for the first `limit` steps or jobs ('' for the
--                 fields of a job whose hash is gone: its retention passed)
--      callbacks  {name, id, type, state, queue, ...} for each callback the batch declared
--   {'not_found'}
-- COST   O(limit) (and a LINDEX and the first job's record for a workflow whose hash names no tenant)
-- CAPS   ARGV[3] members, then at most 3 callbacks
-- CLOCK  Redis TIME (now_ms, for the caller's view)
-- INVARIANTS
--   reads only; 'tenant' is the one the workflow was created with, or its first job's
--@include clock

local P, W = ARG.P, ARG.W
local wk = KEYS[1]
local fields = redis.call('HGETALL', wk)
if #fields == 0 then return {'not_found'} end
if redis.call('HEXISTS', wk, 'tenant') == 0 then
  local first = redis.call('LINDEX', key_workflow_jobs(P, W), 0)
  local tenant = first and rec('HGET', key_job(P, first), 'tenant')
  if tenant then
    fields[#fields + 1] = 'tenant'
    fields[#fields + 1] = tenant
  end
end
local jobs = {}
for _, id in ipairs(redis.call('LRANGE', key_workflow_jobs(P, W), 0, tonumber(ARG.limit) - 1)) do
  local f = rec('HMGET', key_job(P, id), 'type', 'state', 'queue')
  jobs[#jobs + 1] = id
  jobs[#jobs + 1] = f[1] or ''
  jobs[#jobs + 1] = f[2] or ''
  jobs[#jobs + 1] = f[3] or ''
end
local callbacks = {}
for _, name in ipairs({'on_complete', 'on_success', 'on_failure'}) do
  local id = redis.call('HGET', wk, 'cb_' .. name)
  if id then
    local f = rec('HMGET', key_job(P, id), 'type', 'state', 'queue')
    for _, v in ipairs({name, id, f[1] or '', f[2] or '', f[3] or ''}) do callbacks[#callbacks + 1] = v end
  end
end
return {'ok', now_ms(), fields, jobs, callbacks}
