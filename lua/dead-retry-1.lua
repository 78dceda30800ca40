-- dead-retry-1.lua: give a dead-lettered job a new life: back to available with fresh attempts. A job
-- with a unique policy comes back only as an enqueue of it would be written: not while another job
-- holds its key in a state its policy counts (includes/unique.lua).
--
-- KEYS
--   KEYS[1] P..'dead'     zset   dead-lettered job ids scored by the time they died (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
-- RETURNS
--   {'ok', now_ms}
--   {'not_found'}         the job is not in the dead letter set
--   {'duplicate', existing_id, existing_state, uniqueness_key}
--                         another job holds the job's uniqueness key in one of its policy's states;
--                         nothing changed (the job stays dead-lettered)
-- COST   O(log n); a unique job adds a GET of its key, a read of the holder's record and a SET
-- CAPS   no loop
-- CLOCK  Redis TIME
-- INVARIANTS
--   discarded (in P..'dead') -> available (in its ready set); attempt restarts at 0; error history kept;
--   a uniqueness key never gets a second live holder: the revived job takes its key again (for the rest
--   of its period from its creation when it has one: none once that passed; with no expiry without one)
--@include clock
--@include emit
--@include ready
--@include active
--@include unique

local P, id = ARG.P, ARG.id
if not redis.call('ZSCORE', KEYS[1], id) then return {'not_found'} end
local jk = key_job(P, id)
local f = rec('HMGET', jk, 'queue', 'type', 'rank', 'priority', 'rl_key', 'unique', 'unique_states', 'unique_until')
if not f[1] then
  redis.call('ZREM', KEYS[1], id)
  return {'not_found'}
end
local rank = num(f[3])
if not rank then error('ERR job record ' .. jk .. ' is corrupt: rank is not a number', 0) end
local now = now_ms()
if f[6] then
  local holder, state = unique_holder(P, f[6], unique_state_set(f[7] or UNIQUE_DEFAULT_STATES))
  if holder and holder ~= id then return {'duplicate', holder, state, f[6]} end
  unique_retake(P, f[6], id, num(f[8]), now)
end
redis.call('ZREM', KEYS[1], id)
rec('HSET', jk, 'state', 'available', 'attempt', 0, 'enqueued_at', now)
rec('HDEL', jk, 'discarded_at', 'started_at', 'completed_at', 'worker_id')
make_ready(P, jk, id, f[1], rank, f[4], now, f[5])
ev_job_retried(P, id, f[1], f[2], now, 'dead_letter')
return {'ok', now}
