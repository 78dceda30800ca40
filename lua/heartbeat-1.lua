-- heartbeat-1.lua: a worker is alive; extend the leases of the active jobs it holds, read its signal.
--
-- KEYS
--   KEYS[1] P..'active'   zset   active job ids scored by lease deadline (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] worker_id     string the worker ('' when anonymous: no worker record is kept)
--   ARGV[3] visibility_ms int    lease extension for jobs that set no visibility_timeout_ms
--   ARGV[4] worker_ttl_ms int    how long the worker record outlives its last heartbeat
--   ARGV[5..] job ids     string the jobs the worker says it is running
-- RETURNS
--   {'ok', now_ms, signal, id_1, state_1, lease_1, ...}
--      signal is the operator's directive for this worker ('' = run on, 'quiet', 'terminate');
--      state_i is the job's state ('missing' if gone); lease_i the new deadline or -1 if not extended
-- COST   O(log n) per job
-- CLOCK  Redis TIME
-- INVARIANTS
--   only an active job held by this worker (or by no named worker) is extended, together with its
--   rate-limit slots; a lease never outlives the job's execution timeout (started_at + timeout_ms)
--@include clock
--@include active

local P, worker = ARGV[1], ARGV[2]
local default_vt = tonumber(ARGV[3])
local now = now_ms()
local signal = ''
if worker ~= '' then
  local wk = P .. 'worker:' .. worker
  signal = redis.call('HGET', wk, 'signal') or ''
  redis.call('HSET', wk, 'last_seen', now, 'active_jobs', #ARGV - 4)
  redis.call('PEXPIRE', wk, tonumber(ARGV[4]))
end
local reply = {'ok', now, signal}
for i = 5, #ARGV do
  local id = ARGV[i]
  local jk = P .. 'job:' .. id
  local f = redis.call('HMGET', jk, 'state', 'worker_id', 'visibility_ms', 'started_at', 'timeout_ms', 'rl_key', 'qrl',
    'queue')
  local lease = -1
  if f[1] == 'active' and (worker == '' or f[2] == '' or f[2] == worker) then
    lease = lease_deadline(now, tonumber(f[3]) or default_vt, tonumber(f[4]), tonumber(f[5]))
    redis.call('HSET', jk, 'lease_until', lease)
    redis.call('ZADD', KEYS[1], lease, id)
    -- Rate-limit slots are leases too: they follow the job's lease.
    if f[6] then redis.call('ZADD', P .. 'rl:' .. f[6] .. ':active', 'XX', lease, id) end
    if f[7] then redis.call('ZADD', P .. 'q:' .. f[8] .. ':rl:active', 'XX', lease, id) end
  end
  reply[#reply + 1] = id
  reply[#reply + 1] = f[1] or 'missing'
  reply[#reply + 1] = lease
end
return reply
