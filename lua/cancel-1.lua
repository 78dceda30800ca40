-- cancel-1.lua: cancel a job that has not finished.
--
-- KEYS
--   KEYS[1] P..'job:'..id   hash   the job
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] retention_ms  int    retention of the cancelled job's hash; 0 = forever
-- RETURNS
--   {'ok', now_ms, previous_state}
--   {'not_found'}
--   {'state', state}      the job is already completed, cancelled or discarded
-- COST   O(log n)
-- CLOCK  Redis TIME
-- INVARIANTS
--   available|scheduled|retryable|active -> cancelled; the job leaves whichever index held it (ready
--   set, rate-limit lane, P..'scheduled', P..'active' with its rate-limit slots) in the same script. An active job's worker learns it from its next heartbeat, and its ACK/NACK is refused.
--@include clock
--@include emit
--@include ready
--@include active

local P, id = ARGV[1], ARGV[2]
local jk = KEYS[1]
local f = redis.call('HMGET', jk, 'state', 'queue', 'type')
local state, queue = f[1], f[2]
if not state then return {'not_found'} end
local now = now_ms()
if state == 'available' then
  unready(P, jk, queue)
elseif state == 'scheduled' or state == 'retryable' then
  redis.call('ZREM', P .. 'scheduled', id)
  stat(P, queue, 'scheduled', -1)
elseif state == 'active' then
  leave_active(P, jk, id, queue, now)
else
  return {'state', state}
end
redis.call('HSET', jk, 'state', 'cancelled', 'cancelled_at', now)
stat(P, queue, 'cancelled', 1)
emit(P, 'job.cancelled', id, queue, f[3], now, '{"previous_state":"' .. state .. '"}')
finish(jk, tonumber(ARGV[3]))
return {'ok', now, state}
