-- requeue-1.lua: take back jobs whose lease expired (the worker died, hung or lost its network).
--
-- KEYS
--   KEYS[1] P..'active'   zset   active job ids scored by lease deadline (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] limit         int(1..100000) most jobs to take back in this call
--   ARGV[3] jitter_u      number(0..1) in [0,1) for backoff jitter
--   ARGV[4] retention_ms  ms    retention of a discarded job's record; 0 = forever
-- RETURNS
--   {'ok', requeued, timed_out}
-- COST   O(k log n) for k expired leases
-- CAPS   at most ARGV[2] expired leases per call; the rest waits for the next tick
-- CLOCK  Redis TIME
-- INVARIANTS
--   active -> available when the visibility timeout lapsed: the attempt stays spent, and when it was
--   the last one the job is exhausted (discarded / dead letter) instead, so a job that kills its
--   workers cannot loop forever; active -> retryable|discarded through the retry policy when its
--   execution timeout (started_at + timeout_ms) passed; either way its rate-limit slots are given back
--   in the same script; a workflow job discarded here advances its workflow in this script
--   (includes/fail.lua). Safe to run from every API pod at once.
--@include clock
--@include emit
--@include ready
--@include active
--@include fail

local P = ARG.P
local now = now_ms()
local expired = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARG.limit))
local requeued, timed_out = 0, 0
for _, id in ipairs(expired) do
  local jk = key_job(P, id)
  -- A job whose record is corrupt, or holds no rank to wait again by, is set aside (its slots lapse
  -- with its lease); the others are judged as below.
  local bad = rec_bad(jk, true)
  local r = bad and {} or rec('HMGET', jk, 'state', 'queue', 'type', 'attempt', 'max_attempts', 'backoff',
    'on_exhaustion', 'non_retryable', 'rank', 'started_at', 'timeout_ms', 'priority', 'enqueued_at', 'rl_key')
  if not bad and r[1] == 'active' and not num(r[9]) then bad = 'rank is not a number' end
  if bad then
    redis.call('ZREM', KEYS[1], id)
    rec_quarantine(P, id, bad, now)
  elseif r[1] ~= 'active' then
    -- Only reachable if the record vanished (retention on a job that was active): drop the stale entry.
    redis.call('ZREM', KEYS[1], id)
  else
    local f = { queue = r[2], type = r[3], attempt = r[4], max_attempts = r[5], backoff = r[6],
      on_exhaustion = r[7], non_retryable = r[8] }
    leave_active(P, jk, id, f.queue, now)
    local started, timeout = num(r[10]), num(r[11])
    if timeout and timeout > 0 and started and now >= started + timeout then
      timed_out = timed_out + 1
      fail_job(P, jk, id, f, error_json('timeout', 'execution timeout of ' .. text(timeout) .. ' ms exceeded',
        'ExecutionTimeout'), 'ExecutionTimeout', true, now,
        tonumber(ARG.jitter_u), tonumber(ARG.retention_ms))
    elseif num(f.attempt, 0) >= num(f.max_attempts, RETRY_MAX_ATTEMPTS) then
      timed_out = timed_out + 1
      fail_job(P, jk, id, f, error_json('visibility_timeout',
        'the worker neither acknowledged nor heartbeat the job before its lease expired', 'VisibilityTimeout'),
        'VisibilityTimeout', true, now, tonumber(ARG.jitter_u), tonumber(ARG.retention_ms))
    else
      requeued = requeued + 1
      rec('HSET', jk, 'state', 'available')
      make_ready(P, jk, id, f.queue, num(r[9]), r[12], num(r[13], now), r[14])
      ev_job_requeued(P, id, f.queue, f.type, now, 'visibility_timeout')
    end
  end
end
return {'ok', requeued, timed_out}
