-- Unique jobs (options.unique): P..'unique:'..key is a string holding the id of the job that last took
-- the uniqueness key (a fingerprint computed by the server, ojs_core::unique), with PX = the policy's
-- period when it has one, so the constraint ends period after the holder's creation on Redis' clock.
-- Nothing releases a lock when its job moves on: whether the holder still counts is decided here,
-- lazily, by reading its state when a job with the same key is enqueued (a holder whose hash expired
-- after its retention does not count either). ack, nack and cancel do no work for uniqueness.

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
