-- heartbeat-1.lua: a worker is alive; extend the leases of the active jobs it holds, read its signal,
-- record what it says of itself (its state, the jobs it still holds) for the operator.
--
-- KEYS
--   KEYS[1] P..'active'   zset   active job ids scored by lease deadline (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] worker_id     string the worker ('' when anonymous: no worker record is kept; nor is it
--                                written for a request acting as a tenant when another tenant, or
--                                the shared fleet, wrote it first)
--   ARGV[3] extend_ms     ms    lease extension the heartbeat asks for; 0 = the lease length chosen
--                                when the job was claimed (its 'lease_ms')
--   ARGV[4] default_ms    ms    extension for a job claimed before claims recorded 'lease_ms'
--   ARGV[5] worker_ttl_ms ms    how long the worker record outlives its last heartbeat
--   ARGV[6] worker_state  ''|'running'|'quiet'|'drain'|'terminate' what the worker reports ('running', 'quiet', 'drain', 'terminate';
--                                '' = unchanged)
--   ARGV[7] tenant        string the tenant the request acts as ('' = none): another tenant's job is
--                                'missing', as if it did not exist, and its lease is left alone
--   ARGV[8..] the jobs the worker says it is running, one JOB record each
--   record JOB
--     +0  id              string job id
--     +1  lease_id        string the lease the worker holds it by ('' = not named)
-- RETURNS
--   {'ok', now_ms, signal, id_1, state_1, lease_1, ...}
--      signal is the operator's directive for this worker ('' = run on, 'quiet', 'terminate');
--      state_i is the job's state ('missing' if gone); lease_i the new deadline, or -1 when the lease
--      was not extended: the worker no longer holds the job and should stop it
-- COST   O(log n) per job, plus O(log w + m) to prune the m (at most 100) registry entries of workers
--        silent for longer than worker_ttl_ms (w workers)
-- CAPS   the ids given (the server accepts at most 10,000 per list); the prune takes at most 100 silent
--        workers per call
-- CLOCK  Redis TIME
-- INVARIANTS
--   only an active job held by this claim is extended, together with the slots it holds (its rate-limit
--   key's, its queue's, its tenant's in the queue; includes/active.lua slots_follow): the named
--   lease must be the job's current one (includes/lease.lua), and a heartbeat naming no lease must
--   come from the job's worker (or either side anonymous); a lease that already lapsed is never
--   revived (its slots were already counted free; the reaper takes the job back); a request acting as a
--   tenant extends none of another tenant's jobs (each is 'missing' to it); a lease never
--   outlives the job's execution timeout (started_at + timeout_ms); a worker is in P..'workers' (zset
--   scored by last_seen) while its record P..'worker:'..id lives, and the record's 'jobs' lists the
--   jobs it held at its last heartbeat; the record's 'tenant' is the tenant whose request first wrote
--   it ('' for the shared fleet; absent in a record an older build wrote, which the next writer takes),
--   and a request acting as another tenant changes nothing in it and reads no signal from it
--@include clock
--@include active
--@include lease

local P, worker = ARG.P, ARG.worker_id
local extend_ms, default_ms = tonumber(ARG.extend_ms), tonumber(ARG.default_ms)
arg_layout('heartbeat', (#ARGV - ARG.REST + 1) % JOB.STRIDE == 0, 'JOB records')
for i = ARG.REST, #ARGV, JOB.STRIDE do check_JOB(i) end
local now = now_ms()
local signal = ''
local wk = key_worker(P, worker)
-- A worker's record belongs to the tenant whose request first wrote it ('' for the shared fleet: no
-- tenant). A request acting as another tenant neither reads nor writes it: one tenant cannot mark
-- another's worker terminated, keep a dead one alive, or read its signal (a request acting as no tenant,
-- the shared fleet and the operator's side, writes any).
-- A record with no 'tenant' field at all was written by an older build: the next writer's.
local record = worker ~= ''
local owner = false
if record then
  local w = redis.call('HMGET', wk, 'signal', 'tenant', 'last_seen')
  owner = w[2]
  if ARG.tenant ~= '' and w[3] and owner and owner ~= ARG.tenant then
    record = false
  else
    signal = w[1] or ''
  end
end
local reply = {'ok', now, signal}
local held_ids = {}
for i = ARG.REST, #ARGV, JOB.STRIDE do
  local id, lease_id = ARGV[i + JOB.id], ARGV[i + JOB.lease_id]
  local jk = key_job(P, id)
  -- A job whose record is corrupt is no longer this worker's to run (includes/record.lua rec_bad); nor is
  -- another tenant's.
  local f = rec_bad(jk) and {} or rec('HMGET', jk, 'state', 'worker_id', 'lease_ms', 'started_at', 'timeout_ms', 'rl_key', 'qrl',
    'queue', 'lease_until', 'claims', 'attempt', 'visibility_ms', 'tslot', 'tenant')
  if ARG.tenant ~= '' and f[14] ~= ARG.tenant then f = {} end
  local lease = -1
  local held = f[1] == 'active' and num(f[9], 0) > now
    and not lease_refusal({ state = f[1], claims = f[10], attempt = f[11], worker_id = f[2] },
      { lease = lease_id, attempt = '', worker = worker })
  if held then
    local len = extend_ms > 0 and extend_ms or num(f[3]) or num(f[12]) or default_ms
    lease = lease_deadline(now, len, num(f[4]), num(f[5]))
    rec('HSET', jk, 'lease_until', lease)
    redis.call('ZADD', KEYS[1], lease, id)
    slots_follow(P, id, lease, f[6], f[7] and f[8], f[13])
    held_ids[#held_ids + 1] = id
  end
  reply[#reply + 1] = id
  reply[#reply + 1] = f[1] or 'missing'
  reply[#reply + 1] = lease
end
if record then
  local ttl = tonumber(ARG.worker_ttl_ms)
  redis.call('HSET', wk, 'last_seen', now, 'active_jobs', #held_ids, 'jobs', table.concat(held_ids, ' '))
  if ARG.tenant ~= '' then
    redis.call('HSET', wk, 'tenant', ARG.tenant)
  elseif not owner then
    redis.call('HSET', wk, 'tenant', '')
  end
  if ARG.worker_state ~= '' then redis.call('HSET', wk, 'state', ARG.worker_state) end
  redis.call('PEXPIRE', wk, ttl)
  redis.call('ZADD', key_workers(P), now, worker)
  -- At most 100 silent workers leave per heartbeat (every heartbeat prunes, so the registry keeps up).
  local gone = redis.call('ZRANGE', key_workers(P), '-inf', '(' .. (now - ttl), 'BYSCORE', 'LIMIT', 0, 100)
  if #gone > 0 then redis.call('ZREM', key_workers(P), unpack(gone)) end
end
return reply
