-- ack-1.lua: an active job succeeded.
--
-- KEYS
--   KEYS[1] P..'job:'..id   hash   the job
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] result        string JSON result, or '' for none
--   ARGV[4] retention_ms  int    how long the completed job's hash is kept; 0 = forever
-- RETURNS
--   {'ok', now_ms, attempt, queue, type}
--   {'not_found'}
--   {'state', state}      the job is not active (already acked, cancelled, requeued after its lease…)
-- COST   O(log n) (ZREM from P..'active')
-- CLOCK  Redis TIME
-- INVARIANTS
--   active -> completed only; the current 'error' is cleared ('errors' history stays); the job leaves
--   P..'active', the queue's active counter and its rate-limit slots (re-opening parked lanes) in the same
--   script; an ACK for a job already taken back (lease lapsed and requeued) is refused, never applied twice
--@include clock
--@include emit
--@include active

local P, id, result = ARGV[1], ARGV[2], ARGV[3]
local jk = KEYS[1]
local f = redis.call('HMGET', jk, 'state', 'queue', 'type', 'attempt', 'started_at')
if not f[1] then return {'not_found'} end
if f[1] ~= 'active' then return {'state', f[1]} end
local now = now_ms()
leave_active(P, jk, id, f[2], now)
redis.call('HSET', jk, 'state', 'completed', 'completed_at', now)
redis.call('HDEL', jk, 'error')
if result ~= '' then redis.call('HSET', jk, 'result', result) end
stat(P, f[2], 'completed', 1)
emit(P, 'job.completed', id, f[2], f[3], now,
  '{"attempt":' .. f[4] .. ',"duration_ms":' .. (now - (tonumber(f[5]) or now)) .. '}')
finish(jk, tonumber(ARGV[4]))
return {'ok', now, tonumber(f[4]), f[2], f[3]}
