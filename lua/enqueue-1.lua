-- enqueue-1.lua: create one or more jobs and make each ready or scheduled. A batch from
-- POST /jobs/batch is all or nothing; a batch the server coalesced from concurrent single enqueues is
-- 'each': a duplicate id fails only its own job.
--
-- KEYS
--   KEYS[1] P..'queues'   set    every queue name ever enqueued to (GET /queues); routes the script
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'; every other key is built from it and shares
--                                its cluster hash tag, so the script touches one slot
--   ARGV[2] n             int(1..10000) number of jobs: n JOB records follow the fixed arguments
--   ARGV[3] mode          'all'|'each' all: any duplicate id or unique 'reject' conflict, and nothing
--                         is written; each: per job
--   ARGV[4] retention_ms  ms    how long a job cancelled here by on_conflict replace keeps its hash;
--                                0 = forever
--   ARGV[5] schemas       string the stamp of the schema registry the caller checked the jobs' args
--                                with (its copy of P..'args:schemas:stamp'; '' for none)
--   ARGV[6..] the n JOB records
--   record JOB = create   (includes/create.lua declares its fields, for every script that creates jobs)
-- RETURNS
--   {'ok', now_ms, states, pressure, found}
--      states   {state_1, ..., state_n}: 'available' or 'scheduled', or, for a job that was not
--               written: 'conflict' ('each' only: unique on_conflict reject), 'ignored' (on_conflict
--               ignore or raise_priority), ('each' only) 'duplicate' when a job with that id already
--               exists, 'full' when its queue is at its depth bound
--      pressure {queue, depth, bound, warning_threshold, strategy, ...} for each bounded queue the
--               call touched, depth counted after the call
--      found    {found_1, ..., found_n}: for a 'conflict' or 'ignored' job, {existing id, its record
--               packed (rec_packed), as it is after this call's changes to it}; else {}
--   {'duplicate', id}                        'all' only: that job id exists (or repeats in the batch);
--                                            nothing was written
--   {'conflict', index, existing_id, existing_state, existing_index}
--                                            'all' only: job `index` (0-based) has unique on_conflict
--                                            reject and meets a job holding its key in one of its
--                                            states: stored (existing_index '') or earlier in the
--                                            batch; nothing was written
--   {'tenancy', queue, setting}              before anything is written: a job's tenancy is not its
--                                            queue's setting (conf field 'tenancy', '' for none); the
--                                            server resolves the jobs' tenants with it and calls again
--   {'schemas', stamp}                       before anything is written: the caller's copy of the schema
--                                            registry is not this shard's (the stamp it holds, '' for
--                                            none); the server reloads the registry, checks the args
--                                            again and calls again
--   {'full', queue, depth, bound, strategy}  'all' only: the batch would take that queue past its
--                                            depth bound; no job was written (one
--                                            backpressure.rejected event was)
-- COST   O(log n) per job; once per call a GET of the registry's stamp; per job a GET (does the id exist) and a SET of its record; once per batch and
--        queue: one ZADD of all the queue's ready entries, one sequence reservation, the per-priority
--        counts, the index SADDs (rate-limited jobs go through their lane one by one); once per call:
--        one XADD of all its events (includes/emit.lua); a job with a unique policy adds a GET of its key
--        (twice in an 'all' batch: the replay, then the writes), one GET of the holder's record (cached
--        for the call) and a SET; replace adds a cancel; a job with a tenant goes through its sub-queue one
--        by one (includes/tenant.lua: a ZSCORE of its fair-share entry, three more commands when the
--        tenant joins, an SADD to the queue's subs) and moves its counters (HINCRBY, PEXPIRE, ZADD and
--        ZREMRANGEBYSCORE of P..'tenants')
-- CAPS   the per-job loops (includes/create.lua) take the call's n jobs: a batch (at most --max-batch,
--        10,000) or coalesced single enqueues (at most 256); a batch is one call by contract (all or
--        nothing), so its size is the request's
-- CLOCK  Redis TIME
-- INVARIANTS
--   each new job is in exactly one index: its queue's ready set or its rate-limit lane (available), or
--   P..'scheduled' (scheduled); FIFO within a priority follows the order of the batch; 'all' writes no
--   job unless every id in the batch is new and every bounded queue has room for all of the batch's
--   jobs; a queue's depth (available + scheduled + retryable: P..'q:'..Q..':pri' summed plus the
--   'scheduled' gauge) never passes its bound (P..'q:'..Q..':conf' bp_max_depth), because the check and
--   the writes are one script; a job with a rate-limit key makes its policy the key's
--   (newest wins; parked lanes of the key re-open when the limits change: includes/ratelimit.lua);
--   unique (includes/unique.lua): a job with options.unique is written only when no job holding its key
--   is in one of its states (checked here, so racing enqueues on any number of pods cannot both write;
--   a duplicate inside one call meets the earlier job exactly as a stored one); 'replace' cancels the
--   holder (job.cancelled) in the same script that writes its successor, 'raise_priority' changes the
--   holder's priority with PATCH's code (includes/priority.lua); every written job with a key takes it
--   (P..'unique:'..key = its id, PX period) and records it ('unique', and 'unique_states' unless the
--   default, 'unique_until' with a period: what a dead-letter retry checks again)
--@include create

local P = ARG.P
local n = tonumber(ARG.n)
local each = ARG.mode == 'each'
arg_layout('enqueue', #ARGV == ARG.REST - 1 + n * JOB.STRIDE, 'n JOB records')
for i = 0, n - 1 do check_JOB(ARG.REST + i * JOB.STRIDE) end
-- The args were checked with the caller's copy of the schema registry: only if it is this shard's.
local stamp = redis.call('GET', key_arg_schemas_stamp(P)) or ''
if stamp ~= ARG.schemas then return {'schemas', stamp} end

if not each then
  local dup = create_duplicate(P, ARGV, ARG.REST, n)
  if dup then return {'duplicate', dup} end
end
local X = create_begin(P, ARGV, ARG.REST, n, now_ms(), tonumber(ARG.retention_ms))
local refused = (not each and create_unique(X)) or create_tenancy(X) or (not each and create_room(X))
if refused then return refused end
create_write(X, each)
return create_end(X, KEYS[1])
