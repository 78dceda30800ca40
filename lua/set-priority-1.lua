-- set-priority-1.lua: change the priority of a job that has not started (PATCH /jobs/{id}).
--
-- KEYS
--   KEYS[1] P..'job:'..id   hash   the job
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] priority      int    the new priority as the client gave it
--   ARGV[4] rank          int    its internal rank (lower runs first)
-- RETURNS
--   {'ok', now_ms, previous_priority, state, queue}
--   {'not_found'}
--   {'state', state}      the job is active, retryable or finished: its priority can no longer matter
-- COST   O(log n): one ZADD (the job keeps its member, so among equal priorities it keeps its place
--        by original readiness)
-- CLOCK  Redis TIME
-- INVARIANTS
--   only available and scheduled jobs change; an available job stays in its ready set (or its
--   rate-limit lane, whose head stays its best job) under the same member with the new score; the per-priority ready counts move with it; emits priority.changed
--@include clock
--@include emit
--@include ready

local P, id, priority, rank = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local jk = KEYS[1]
local f = redis.call('HMGET', jk, 'state', 'queue', 'type', 'priority', 'member', 'enqueued_at', 'rl_key')
local state, queue = f[1], f[2]
if not state then return {'not_found'} end
if state ~= 'available' and state ~= 'scheduled' then return {'state', state} end
local now = now_ms()
if state == 'available' and f[5] then
  local score = ready_score(P, queue, rank, tonumber(f[6]))
  local key = f[7]
  if key and redis.call('HGET', P .. 'q:' .. queue .. ':heads', key) ~= f[5] then
    redis.call('ZADD', lane_key(P, queue, key), 'XX', score, f[5])
  else
    redis.call('ZADD', P .. 'q:' .. queue .. ':ready', 'XX', score, f[5])
  end
  if key then lane_rebalance(P, queue, key) end
  local pk = P .. 'q:' .. queue .. ':pri'
  if redis.call('HINCRBY', pk, f[4], -1) <= 0 then redis.call('HDEL', pk, f[4]) end
  redis.call('HINCRBY', pk, priority, 1)
end
redis.call('HSET', jk, 'priority', priority, 'rank', rank)
emit(P, 'priority.changed', id, queue, f[3], now,
  '{"previous_priority":' .. f[4] .. ',"new_priority":' .. priority .. '}')
return {'ok', now, tonumber(f[4]), state, queue}
