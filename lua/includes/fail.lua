-- fail_job: the retry policy, applied when an attempt failed (NACK, execution timeout, lease expiry).
-- The attempt that failed is f.attempt (FETCH counted it). Reads nothing; the caller passed the fields.
--   f        table with queue, type, attempt, max_attempts, backoff, on_exhaustion, non_retryable
--   err      JSON object text of the error, e.g. {"code":"x","message":"y"} (kept as text: errors.lua)
--   match    the error's type (or code) for non_retryable_errors patterns
--   retryable false when the worker says the error is final
--   jitter_u a uniform random number in [0,1) chosen by the caller (scripts stay deterministic)
--   retention_ms for discarded jobs that do not go to the dead letter set
-- Returns state ('retryable' | 'discarded'), delay_ms (or -1). A discarded workflow job advances its
-- workflow (includes/workflow.lua) in the same call.
-- CAPS: the loop visits the job's own non_retryable_errors patterns (its envelope's list).
--@include workflow
--@include errors
-- Backoff ('backoff' field = "<strategy> <initial_ms> <coefficient> <max_ms> <jitter 0|1>"):
--   exponential: initial * coefficient^(attempt-1); linear: initial * attempt; constant: initial;
--   capped at max_ms; with jitter the delay is multiplied by 0.5 + jitter_u (so 50%..150%).

local function matches_non_retryable(list_json, match)
  if not list_json or list_json == '' or not match or match == '' then return false end
  for _, pat in ipairs(cjson.decode(list_json)) do
    if pat == match then return true end
    if string.sub(pat, -1) == '*' then
      local prefix = string.sub(pat, 1, -2)
      if string.sub(prefix, -1) == '.' then prefix = string.sub(prefix, 1, -2) end
      if string.sub(match, 1, string.len(prefix)) == prefix then return true end
    end
  end
  return false
end

-- backoff_ms is total: every input is checked (a spec that does not parse, or a number that is not finite
-- or out of range, takes the default policy's), and the delay is clamped to [0, max_ms] before it is
-- multiplied, so no attempt, however late, makes it NaN or infinite (0 * 100^155 was NaN: issue 40).
local function backoff_parts(spec)
  local strategy, initial, coef, maxms, jitter = string.match(spec or '', '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
  initial, coef, maxms = tonumber(initial), tonumber(coef), tonumber(maxms)
  if not (strategy and finite(initial) and initial >= 0 and finite(coef) and coef >= 0 and finite(maxms)
      and maxms >= 0) then
    return nil
  end
  return strategy, initial, coef, maxms, jitter
end

local function backoff_ms(spec, attempt, jitter_u)
  local strategy, initial, coef, maxms, jitter = backoff_parts(spec)
  if not strategy then
    -- A record without its own: the default policy's (RETRY_BACKOFF, from ojs-core's retry_defaults.rs).
    strategy, initial, coef, maxms, jitter = backoff_parts(RETRY_BACKOFF)
  end
  local d
  if initial == 0 then
    d = 0
  elseif strategy == 'linear' then
    d = initial * attempt
  elseif strategy == 'constant' then
    d = initial
  else
    d = initial * (coef ^ (attempt - 1))
  end
  -- d is not NaN here (initial > 0, coef >= 0), but may be infinite: the cap takes it.
  if not (d <= maxms) then d = maxms end
  if jitter == '1' then d = d * (0.5 + jitter_u) end
  return math.floor(d)
end

local function fail_job(P, jk, id, f, err, match, retryable, now, jitter_u, retention_ms)
  local attempt = num(f.attempt, 0)
  local entry = error_entry(err, attempt, now)
  rec('HSET', jk, 'error', entry, 'errors', (rec('HGET', jk, 'errors') or '') .. entry)
  stat(P, f.queue, 'failed', 1)
  local final = (not retryable) or attempt >= num(f.max_attempts, RETRY_MAX_ATTEMPTS)
    or matches_non_retryable(f.non_retryable, match)
  if not final then
    local delay = backoff_ms(f.backoff, attempt, jitter_u)
    rec('HSET', jk, 'state', 'retryable', 'scheduled_at', now + delay, 'retry_delay_ms', delay)
    redis.call('ZADD', key_scheduled(P), now + delay, id)
    stat(P, f.queue, 'scheduled', 1)
    ev_job_retrying(P, id, f.queue, f.type, now, attempt, delay, err, nil)
    return 'retryable', delay
  end
  -- A job that ran and failed for good has finished: completed_at marks when (jobs discarded without
  -- running, expired or dropped by a rate limit, get only discarded_at).
  rec('HSET', jk, 'state', 'discarded', 'discarded_at', now, 'completed_at', now)
  stat(P, f.queue, 'discarded', 1)
  ev_job_failed(P, id, f.queue, f.type, now, attempt, err)
  local w = rec('HMGET', jk, 'wf', 'wf_i')
  wf_job_ended(P, w[1], w[2], 'failed', nil, now, retention_ms)
  if f.on_exhaustion == 'dead_letter' then
    redis.call('ZADD', key_dead(P), now, id)
    ev_job_dead_lettered(P, id, f.queue, f.type, now)
  else
    ev_job_discarded(P, id, f.queue, f.type, now)
    finish(P, jk, id, retention_ms, now)
  end
  return 'discarded', -1
end
