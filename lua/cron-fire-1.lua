-- cron-fire-1.lua: fire one tick of a cron entry (OJS cron §6): claim the tick and create its job, in
-- one script, so each tick fires once however many pods race, and a crash cannot fire it twice or lose
-- the job of a claimed tick.
--
-- KEYS
--   KEYS[1] P..'queues'   set    every queue name ever enqueued to (GET /queues); routes the script
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] retention_ms  ms    how long a job cancelled here (on_conflict replace, overlap
--                                cancel_previous) keeps its hash; 0 = forever
--   ARGV[3] name          string the cron entry's name (its hash: see cron-set-1.lua)
--   ARGV[4] expected      ms    its next_run_at as read (ms): the tick being fired
--   ARGV[5] next_run_at   ms?    its new next_run_at ('' = none: the entry fires no more)
--   ARGV[6] overlap       'skip'|'allow'|'cancel_previous'|'enqueue' overlap_policy: skip | allow | cancel_previous | enqueue
--   ARGV[7..] one JOB record: the tick's job
--   record JOB = create   (includes/create.lua declares its fields)
-- RETURNS
--   {'ok', now_ms, states, pressure, found}  as enqueue-1.lua's, for the one job: 'available' or
--                                            'scheduled' (the entry's last_job is now that job, and
--                                            cron.triggered emitted), or 'conflict' / 'ignored' with
--                                            the unique holder in found (cron.skipped emitted)
--   {'cron_taken'}                           the tick was already fired (by another pod) or the entry
--                                            changed or went; nothing was written
--   {'cron_skipped', previous_job_id}        overlap skip: the previous job has not ended (active, or
--                                            still waiting to run); the tick was claimed (next_run_at
--                                            advanced) and cron.skipped emitted, no job written
--   {'tenancy', queue, setting}              before anything is written: the job's tenancy is not its
--                                            queue's setting; the server resolves it again and calls
--                                            again
--   {'full', queue, depth, bound, strategy}  the job's queue is at its depth bound: the tick is claimed
--                                            even so, no job was written (one backpressure.rejected
--                                            event was)
--   {'duplicate', id}                        the job's id exists; nothing was written
-- COST   enqueue-1.lua's for one job, plus an HMGET, three HSET/HINCRBY and a ZADD or ZREM of the entry;
--        overlap skip and cancel_previous read the previous job's state (an HGET)
-- CAPS   one job: the loops of includes/create.lua run once
-- CLOCK  Redis TIME
-- INVARIANTS
--   the tick is claimed by compare-and-set on the entry's next_run_at (P..'cron:due' follows it), so
--   it fires once; the job is written as enqueue-1.lua writes one (its invariants hold); the entry's
--   last_job names the last job a tick created, which the overlap policies look at
--@include create

local P = ARG.P
local name = ARG.name
arg_layout('cron_fire', #ARGV == ARG.REST - 1 + JOB.STRIDE, 'one JOB record')
check_JOB(ARG.REST)
local dup = create_duplicate(P, ARGV, ARG.REST, 1)
if dup then return {'duplicate', dup} end
local now = now_ms()
local retention = tonumber(ARG.retention_ms)
local X = create_begin(P, ARGV, ARG.REST, 1, now, retention)
X.cron = name
local refused = create_tenancy(X)
if refused then return refused end
local queue, jtype = ARGV[ARG.REST + JOB.queue], ARGV[ARG.REST + JOB.job_type]

-- Only the caller that saw this next_run_at fires the tick.
local ck = key_cron(P, name)
local cur = redis.call('HMGET', ck, 'next_run_at', 'last_job')
if cur[1] ~= ARG.expected then return {'cron_taken'} end
if ARG.next_run_at ~= '' then
  local nxt = text(tonumber(ARG.next_run_at))
  redis.call('HSET', ck, 'next_run_at', nxt)
  redis.call('ZADD', key_cron_due(P), nxt, name)
else
  redis.call('HDEL', ck, 'next_run_at')
  redis.call('ZREM', key_cron_due(P), name)
end
redis.call('HSET', ck, 'last_run_at', now)
incr(ck, 'run_count', 1)
-- skip: the previous run has not ended (running, or still waiting to run: another run would only pile
-- up behind it); cancel_previous: the previous run is running.
local prev = cur[2]
local prev_state = prev and rec('HGET', key_job(P, prev), 'state')
if ARG.overlap == 'skip' and prev_state and prev_state ~= 'completed' and prev_state ~= 'cancelled'
  and prev_state ~= 'discarded' then
  ev_cron_skipped(P, prev, queue, jtype, now, name, 'previous run still ' .. prev_state)
  return {'cron_skipped', prev}
end
if ARG.overlap == 'cancel_previous' and prev_state == 'active' then
  cancel_job(P, key_job(P, prev), prev, retention, now)
end

refused = create_room(X)
if refused then return refused end
create_write(X, false)
local reply = create_end(X, KEYS[1])
local state = X.states[1]
if state == 'available' or state == 'scheduled' then
  local id = ARGV[ARG.REST + JOB.id]
  redis.call('HSET', ck, 'last_job', id)
  ev_cron_triggered(P, id, queue, jtype, now, name)
end
return reply
