-- nack-1.lua: an active job failed; apply its retry policy, or release it untouched (requeue).
--
-- KEYS
--   KEYS[1] P..'job:'..id   string the job's record (includes/record.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] error         string JSON object of the error as the worker reported it (non-empty object)
--   ARGV[4] match_key     string the error's type (or code), matched against non_retryable_errors
--   ARGV[5] retryable     flag   the worker's verdict
--   ARGV[6] requeue       flag   1: release the job back to available at once, keeping its attempt unspent
--   ARGV[7] jitter_u      number(0..1) in [0,1) for backoff jitter
--   ARGV[8] retention_ms  ms    retention of a discarded job's record; 0 = forever
--   ARGV[9] rate_limit_until ms  ms; when > now the worker reports the downstream is rate-limiting
--                                (error.rate_limit_until): the job's key is blocked until then and the
--                                job goes back to waiting without spending the attempt
--   ARGV[10] lease_id     string the claim the worker acts for ('' = not named; see includes/lease.lua)
--   ARGV[11] attempt      int? the attempt the worker was given ('' = not named)
--   ARGV[12] worker_id    string the worker ('' = not named)
--   ARGV[13] tenant       string the tenant the request acts as ('' = none): another tenant's job is
--                                'not_found', as if it did not exist, and nothing changes
--   (an adaptive key, includes/ratelimit.lua "Adaptive": a NACK with rate_limit_until, or whose
--   match_key is an error type its policy names, halves the key's limits; the latter also gives the
--   attempt back and the job waits again, state available)
-- RETURNS
--   {'ok', now_ms, state, attempt, delay_ms, max_attempts, queue, type}
--      state: 'retryable' | 'discarded' | 'available'; delay_ms is -1 unless retryable
--   {'not_found'}
--   {'state', state}      the job is not active
--   {'lease_lost', state} the request named a claim the job no longer holds; nothing changed
-- COST   O(log n); a job of an adaptive key adds a GET of its policy, and a reported rate limit an HMGET,
--        HSETs and a PEXPIRE of its adaptation (includes/ratelimit.lua Adapt.down); a job of a key
--        with a floor re-computes what the key owes its pools (a GET of its policy, an HMGET of its
--        override and a ZCOUNT of its holders; unless it holds its floor before and after, an SMEMBERS
--        and per lane an HGET of the queue's conf, an HEXISTS and an HGET); a job in a queue with a
--        concurrency pops the pool's waiting lanes (a ZPOPMIN; at most POOL_WAKE_MAX = 10 re-opened)
-- CAPS   no loop of its own; a discard advances the job's workflow (includes/workflow.lua: a failed
--        chain's sweep ends at most 500 steps per call)
-- CLOCK  Redis TIME
-- INVARIANTS
--   active -> retryable (in P..'scheduled'), discarded (in P..'dead' when on_exhaustion is
--   dead_letter) or available (requeue or rate_limit_until, in its ready set or lane); the job leaves
--   P..'active' and gives back its rate-limit slots in the same script; a NACK from a fenced-off claim
--   changes nothing; a workflow job discarded here advances its workflow in this script (includes/fail.lua)
--@include clock
--@include emit
--@include ready
--@include active
--@include fail
--@include lease

local P, id, err, match = ARG.P, ARG.id, ARG.error, ARG.match_key
local jk = KEYS[1]
local r = rec('HMGET', jk, 'state', 'queue', 'type', 'attempt', 'max_attempts', 'backoff',
  'on_exhaustion', 'non_retryable', 'rank', 'priority', 'enqueued_at', 'rl_key', 'claims', 'worker_id', 'rl',
  'rl_round', 'tenant')
if not r[1] then return {'not_found'} end
if ARG.tenant ~= '' and r[17] ~= ARG.tenant then return {'not_found'} end
local refused = lease_refusal({ state = r[1], claims = r[13], attempt = r[4], worker_id = r[14] },
  { lease = ARG.lease_id, attempt = ARG.attempt, worker = ARG.worker_id })
if refused then return refused end
if r[1] ~= 'active' then return {'state', r[1]} end
-- Decided before the first write: where the job waits again (its rank and since when), its attempt.
local rank, since = num(r[9]), num(r[11], 0)
if not rank then error('ERR job record ' .. jk .. ' is corrupt: rank is not a number', 0) end
local attempt, max_attempts = num(r[4], 0), num(r[5], RETRY_MAX_ATTEMPTS)
local f = { queue = r[2], type = r[3], attempt = r[4], max_attempts = r[5], backoff = r[6],
  on_exhaustion = r[7], non_retryable = r[8] }
local now = now_ms()
leave_active(P, jk, id, f.queue, now)
local rl_until = tonumber(ARG.rate_limit_until)
-- An adaptive key (ratelimit.lua "Adaptive"): a rate limit reported by rate_limit_until or by an error
-- type its policy names halves its limits; such a type also gives the job its attempt back, and it
-- waits again in its lane.
local adaptive = Adapt.of(P, r[12], r[15])
local named = adaptive and match ~= '' and string.find(adaptive.adapt.types, ',' .. match .. ',', 1, true)
if adaptive and (rl_until > now or named) then
  Adapt.down(P, r[12], adaptive, r[16], now, id, f.queue, f.type)
end
if named and rl_until <= now then
  rec('HINCRBY', jk, 'attempt', -1)
  rec('HSET', jk, 'state', 'available')
  make_ready(P, jk, id, f.queue, rank, r[10], since, r[12])
  ev_job_retrying(P, id, f.queue, f.type, now, nil, 0, err, true)
  return {'ok', now, 'available', attempt - 1, -1, max_attempts, f.queue, f.type}
end
if rl_until > now then
  rec('HINCRBY', jk, 'attempt', -1)
  if r[12] then
    -- Dynamic back-off (seed §9): block the key, and wait in its lane without spending an attempt.
    redis.call('SET', key_rl_until(P, r[12]), rl_until, 'PXAT', rl_until)
    rec('HSET', jk, 'state', 'available')
    make_ready(P, jk, id, f.queue, rank, r[10], since, r[12])
    ev_rate_limit_dynamic_adjusted(P, id, f.queue, f.type, now, r[12], rl_until, err)
    return {'ok', now, 'available', attempt - 1, -1, max_attempts, f.queue, f.type}
  end
  -- No key to block: retry at that time, still without spending the attempt.
  rec('HSET', jk, 'state', 'retryable', 'scheduled_at', rl_until, 'retry_delay_ms', rl_until - now)
  redis.call('ZADD', key_scheduled(P), rl_until, id)
  stat(P, f.queue, 'scheduled', 1)
  ev_job_retrying(P, id, f.queue, f.type, now, nil, rl_until - now, nil, true)
  return {'ok', now, 'retryable', attempt - 1, rl_until - now, max_attempts, f.queue, f.type}
end
if ARG.requeue == '1' then
  -- A graceful release: the worker did not run the job to a failure, so the attempt is given back.
  rec('HINCRBY', jk, 'attempt', -1)
  rec('HSET', jk, 'state', 'available')
  make_ready(P, jk, id, f.queue, rank, r[10], since, r[12])
  ev_job_released(P, id, f.queue, f.type, now)
  return {'ok', now, 'available', attempt - 1, -1, max_attempts, f.queue, f.type}
end
local state, delay = fail_job(P, jk, id, f, err, match, ARG.retryable == '1', now, tonumber(ARG.jitter_u),
  tonumber(ARG.retention_ms))
return {'ok', now, state, attempt, delay, max_attempts, f.queue, f.type}
