-- enqueue-1.lua: create one or more jobs (a batch is all or nothing) and make each ready or scheduled.
--
-- KEYS
--   KEYS[1] P..'queues'   set    every queue name ever enqueued to (GET /queues); routes the script
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'; every other key is built from it and shares
--                                its cluster hash tag, so the script touches one slot
--   ARGV[2] n             int    number of jobs; then 17 fields per job, starting at ARGV[3]:
--     +0 id (UUIDv7)  +1 queue  +2 type  +3 rank (lower runs first)  +4 doc (job JSON without system fields)
--     +5 max_attempts  +6 backoff spec  +7 on_exhaustion  +8 non_retryable (JSON array or '')
--     +9 timeout_ms (0 none)  +10 visibility_ms (0 server default)  +11 expires_at ms (0 none)
--     +12 scheduled_at ms (0 none)  +13 delay_ms (0 none)  +14 priority as the client gave it
--     +15 rate-limit key ('' none)  +16 rate-limit policy (see includes/ratelimit.lua; '' none)
-- RETURNS
--   {'ok', now_ms, state_1, ..., state_n}   state_i is 'available' or 'scheduled'
--   {'duplicate', id}                        a job with that id exists; nothing was written
-- COST   O(log n) per job (one ZADD); plus one XADD per job
-- CLOCK  Redis TIME
-- INVARIANTS
--   each new job is in exactly one index: its queue's ready set (available) or P..'scheduled'
--   (scheduled); no job is written unless every id in the batch is new
--@include clock
--@include emit
--@include ready
--@include active

local P = ARGV[1]
local n = tonumber(ARGV[2])
local STRIDE = 17

for i = 0, n - 1 do
  local id = ARGV[3 + i * STRIDE]
  if redis.call('EXISTS', P .. 'job:' .. id) == 1 then
    return {'duplicate', id}
  end
end

local now = now_ms()
local reply = {'ok', now}
for i = 0, n - 1 do
  local b = 3 + i * STRIDE
  local id, queue, jtype, rank, doc = ARGV[b], ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3]), ARGV[b + 4]
  local run_at = tonumber(ARGV[b + 12])
  local delay = tonumber(ARGV[b + 13])
  if delay > 0 and now + delay > run_at then run_at = now + delay end
  local jk = P .. 'job:' .. id
  redis.call('HSET', jk, 'doc', doc, 'queue', queue, 'type', jtype, 'rank', rank, 'priority', ARGV[b + 14],
    'attempt', 0, 'max_attempts', ARGV[b + 5], 'backoff', ARGV[b + 6], 'on_exhaustion', ARGV[b + 7],
    'created_at', now, 'enqueued_at', now)
  if ARGV[b + 8] ~= '' then redis.call('HSET', jk, 'non_retryable', ARGV[b + 8]) end
  if ARGV[b + 9] ~= '0' then redis.call('HSET', jk, 'timeout_ms', ARGV[b + 9]) end
  if ARGV[b + 10] ~= '0' then redis.call('HSET', jk, 'visibility_ms', ARGV[b + 10]) end
  if ARGV[b + 11] ~= '0' then redis.call('HSET', jk, 'expires_at', ARGV[b + 11]) end
  local rl_key = nil
  if ARGV[b + 15] ~= '' then
    rl_key = ARGV[b + 15]
    redis.call('HSET', jk, 'rl_key', rl_key, 'rl', ARGV[b + 16])
    redis.call('ZADD', P .. 'rl:keys', 0, rl_key)
    redis.call('SET', P .. 'rl:' .. rl_key .. ':policy', ARGV[b + 16])
  end
  redis.call('SADD', KEYS[1], queue)
  if run_at > now then
    redis.call('HSET', jk, 'state', 'scheduled', 'scheduled_at', run_at)
    redis.call('ZADD', P .. 'scheduled', run_at, id)
    stat(P, queue, 'scheduled', 1)
    emit(P, 'job.scheduled', id, queue, jtype, now, '{"scheduled_at":' .. run_at .. '}')
    reply[#reply + 1] = 'scheduled'
  else
    redis.call('HSET', jk, 'state', 'available')
    make_ready(P, jk, id, queue, rank, ARGV[b + 14], now, rl_key)
    emit(P, 'job.enqueued', id, queue, jtype, now, nil)
    reply[#reply + 1] = 'available'
  end
end
return reply
