-- workflow-create-1.lua: create a workflow (ojs-workflows: chain, group, batch) and all of its jobs,
-- all or nothing: the first step (chain) or every job (group, batch) is made ready or scheduled; later
-- steps and the callbacks wait 'pending' until includes/workflow.lua releases them.
--
-- KEYS
--   KEYS[1] P..'queues'   set    every queue name ever enqueued to (GET /queues); routes the script
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] n             int(1..10003) number of jobs: the m members, then the callbacks
--   ARGV[3] id            string the workflow's id
--   ARGV[4] kind          'chain'|'group'|'batch'
--   ARGV[5] name          string
--   ARGV[6] m             int(1..10000) the number of steps/jobs (the first m jobs)
--   ARGV[7..] the n JOB records (its jobs carry no unique policy, dedup or root info), then one
--           callback name (on_complete | on_success | on_failure) for each of the n - m jobs after
--           the first m
--   record JOB = create   (includes/create.lua declares its fields)
-- RETURNS
--   {'ok', now_ms, states, pressure, found}  as enqueue-1.lua's: states 'available', 'scheduled' or
--                                            'pending'; found all {}
--   {'duplicate', id}                        that job id exists (or repeats in the workflow), or that
--                                            workflow id does; nothing was written
--   {'tenancy', queue, setting}              before anything is written: a job's tenancy is not its
--                                            queue's setting; the server resolves the jobs' tenants
--                                            with it and calls again
--   {'full', queue, depth, bound, strategy}  the workflow's ready jobs would take that queue past its
--                                            depth bound (pending ones do not count until released);
--                                            nothing was written (one backpressure.rejected event was)
-- COST   enqueue-1.lua's for its n jobs, plus the workflow's hash (one HSET), its job list (an RPUSH
--        per 1,000 members) and its listing entry (a ZADD)
-- CAPS   n is at most 10,000 jobs and 3 callbacks (ojs_core::workflow::MAX_WORKFLOW_JOBS): the loops
--        of includes/create.lua and the member list take them once; RPUSH goes 1,000 ids at a time
-- CLOCK  Redis TIME
-- INVARIANTS
--   all or nothing; each ready job is in exactly one index (its queue's ready set, its rate-limit lane
--   or P..'scheduled'), each pending one in none (the workflow's list or callback fields hold it); every
--   job's record names its workflow (wf) and its index or callback name (wf_i); the workflow's hash,
--   its list and its P..'workflows' entry are written with its jobs (see includes/workflow.lua); the
--   hash's 'tenant' is its first job's tenant (absent when it has none): the tenant the workflow belongs
--   to (the server gives every job of a workflow one tenant, unless its queues' tenancy settings derive
--   others)
--@include create

local P = ARG.P
local n = tonumber(ARG.n)
local W = ARG.id
local kind = ARG.kind
local m = tonumber(ARG.m)
arg_layout('workflow_create', m <= n and #ARGV == ARG.REST - 1 + n * JOB.STRIDE + n - m,
  'n JOB records and a callback name for each after the m-th')
for i = 0, n - 1 do check_JOB(ARG.REST + i * JOB.STRIDE) end
local TAIL = ARG.REST + n * JOB.STRIDE
local cb = {}
for i = m, n - 1 do cb[i] = ARGV[TAIL + i - m] end

if redis.call('EXISTS', key_workflow(P, W)) == 1 then return {'duplicate', W} end
local dup = create_duplicate(P, ARGV, ARG.REST, n)
if dup then return {'duplicate', dup} end
local now = now_ms()
local X = create_begin(P, ARGV, ARG.REST, n, now, 0)
X.wf = { id = W, cb = cb }
-- A chain's steps after the first and every callback wait for their turn.
X.waits = function(i) return (kind == 'chain' and i > 0) or i >= m end
local refused = create_tenancy(X) or create_room(X)
if refused then return refused end
create_write(X, false)
local reply = create_end(X, KEYS[1])

local h = {'type', kind, 'name', ARG.name, 'state', 'running', 'total', m, 'completed', 0, 'failed', 0,
  'created_at', now}
if kind == 'chain' then
  h[#h + 1] = 'cursor'
  h[#h + 1] = 0
end
local tenant = ARGV[ARG.REST + JOB.tenant]
if tenant ~= '' then
  h[#h + 1] = 'tenant'
  h[#h + 1] = tenant
end
local ids = {}
for i = 0, n - 1 do
  local id = ARGV[ARG.REST + i * JOB.STRIDE + JOB.id]
  if i < m then
    ids[#ids + 1] = id
  else
    h[#h + 1] = 'cb_' .. cb[i]
    h[#h + 1] = id
  end
end
redis.call('HSET', key_workflow(P, W), unpack(h))
for s = 1, #ids, 1000 do
  redis.call('RPUSH', key_workflow_jobs(P, W), unpack(ids, s, math.min(s + 999, #ids)))
end
redis.call('ZADD', key_workflows(P), now, W)
ev_workflow_created(P, '', '', '', now, W, kind, ARG.name)
return reply
