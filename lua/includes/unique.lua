-- Unique jobs (options.unique): P..'unique:'..key is a string holding the id of the job that last took
-- the uniqueness key (a fingerprint computed by the server, ojs_core::unique), with PX = the policy's
-- period when it has one, so the constraint ends period after the holder's creation on Redis' clock.
-- Whether the holder still counts is decided here, lazily, by reading its state when a job with the same
-- key is enqueued (a holder whose record expired after its retention does not count either). A lock
-- only leaves with its holder: when the holder ends (includes/active.lua's finish: ack, discard, cancel,
-- expiry, superseded), a lock still naming it expires with its record, no later (unique_release); a
-- dead-lettered holder deleted for good deletes it. Without a period, a lock thus lives while its
-- holder lives, then for the retention (forever when records are kept forever).
--
-- The holder's record keeps what a dead-letter retry needs to check its key again as an enqueue would:
-- 'unique' (the key), 'unique_states' (the policy's states, comma-separated; absent when they are the
-- default, UNIQUE_DEFAULT_STATES) and 'unique_until' (ms: creation + period; absent without a period).
-- CAPS: the loop visits the policy's states (at most the seven OJS states).

-- The states a policy counts when it names none: ojs_core::unique::DEFAULT_STATES, in its order (the
-- server sends them so), so that a record with the default policy stores none.
local UNIQUE_DEFAULT_STATES = 'available,active,scheduled,retryable,pending'

-- unique_state_set(csv): the states of a comma-separated list, as a set (state -> true).
local function unique_state_set(csv)
  local states = {}
  for st in string.gmatch(csv, '[^,]+') do states[st] = true end
  return states
end

-- unique_holder(P, key, states): the job holding the key, and its state, when that state is one of
-- `states` (a set: state -> true); nil otherwise.
local function unique_holder(P, key, states)
  local id = redis.call('GET', key_unique(P, key))
  if not id then return nil end
  local state = rec('HGET', key_job(P, id), 'state')
  if state and states[state] then return id, state end
  return nil
end

-- unique_take(P, key, id, period_ms): the job id takes the key (for period_ms when > 0).
local function unique_take(P, key, id, period_ms)
  if period_ms > 0 then
    redis.call('SET', key_unique(P, key), id, 'PX', period_ms)
  else
    redis.call('SET', key_unique(P, key), id)
  end
end

-- unique_retake(P, key, id, until_ms, now): a job coming back to life (a dead-letter retry) takes its key
-- again: until until_ms (its creation + its period) when it has a period, so not at all once that
-- passed; with no period (until_ms nil), with no expiry.
local function unique_retake(P, key, id, until_ms, now)
  if not until_ms then
    unique_take(P, key, id, 0)
  elseif until_ms > now then
    unique_take(P, key, id, until_ms - now)
  end
end

-- unique_release(P, key, id, ttl_ms): the job id ends: if its key's lock still names it, the lock expires
-- in ttl_ms at the latest (PEXPIRE LT: a lock without a TTL gets it, a period's shorter TTL is kept;
-- Redis 7.0+, Valkey), or now when ttl_ms is 0. A lock another job took since is left alone.
local function unique_release(P, key, id, ttl_ms)
  local lk = key_unique(P, key)
  if redis.call('GET', lk) ~= id then return end
  if ttl_ms > 0 then
    redis.call('PEXPIRE', lk, ttl_ms, 'LT')
  else
    redis.call('DEL', lk)
  end
end
