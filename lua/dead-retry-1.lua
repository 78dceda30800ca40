-- dead-retry-1.lua: give a dead-lettered job a new life: back to available with fresh attempts.
--
-- KEYS
--   KEYS[1] P..'dead'     zset   dead-lettered job ids scored by the time they died (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
-- RETURNS
--   {'ok', now_ms}
--   {'not_found'}         the job is not in the dead letter set
-- COST   O(log n)
-- CLOCK  Redis TIME
-- INVARIANTS
--   discarded (in P..'dead') -> available (in its ready set); attempt restarts at 0; error history kept
--@include clock
--@include emit
--@include ready
--@include active

local P, id = ARGV[1], ARGV[2]
if not redis.call('ZSCORE', KEYS[1], id) then return {'not_found'} end
local jk = key_job(P, id)
local f = rec('HMGET', jk, 'queue', 'type', 'rank', 'priority', 'rl_key')
redis.call('ZREM', KEYS[1], id)
if not f[1] then return {'not_found'} end
local now = now_ms()
rec('HSET', jk, 'state', 'available', 'attempt', 0, 'enqueued_at', now)
rec('HDEL', jk, 'discarded_at', 'started_at', 'completed_at', 'worker_id')
make_ready(P, jk, id, f[1], tonumber(f[3]), f[4], now, f[5])
emit(P, 'job.retried', id, f[1], f[2], now, '{"from":"dead_letter"}')
return {'ok', now}
