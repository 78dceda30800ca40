#!lua name=ojs_layout_floor
-- benches/layout: the least a plain job's FETCH and ACK can cost Redis, in two storage layouts, so the
-- layout's share of a processed job's cost can be told apart from the logic's (benches/layout/run.sh).
-- Each function does what the real scripts do for a job that uses no feature (no limit, workflow,
-- unique, dedup, root, expiry, progress), one request per call, with the same commands:
--   v2: the job is one string, a MessagePack map of every field, the envelope's JSON among them
--       (lua/includes/record.lua): GET + unpack, change, pack + SET, at each transition.
--   v3: the job's system fields are a hash that transitions read with HMGET and change with HSET/HDEL;
--       the envelope is a separate string written once, read only by FETCH and handed back as it is.
-- KEYS: none (the keys are built from ARGV[1], a prefix); this library is for a private redis-server.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function event(P, etype, id, queue, jtype, now, data)
  redis.call('XADD', P .. 'events', 'MAXLEN', '~', '100000', '*', etype,
    id .. ' ' .. queue .. ' ' .. jtype .. ' ' .. now .. ' ' .. data)
end

-- v2a: the same single string, a MessagePack ARRAY with one position per known field (false where a
-- job has none) instead of a map: no field names stored, unpacked or hashed.
local FIELDS = {'state', 'queue', 'type', 'priority', 'rank', 'attempt', 'max_attempts', 'backoff', 'on_exhaustion',
  'non_retryable', 'timeout_ms', 'visibility_ms', 'expires_at', 'created_at', 'enqueued_at', 'scheduled_at',
  'started_at', 'completed_at', 'cancelled_at', 'discarded_at', 'retry_delay_ms', 'lease_until', 'worker_id', 'claims',
  'lease_ms', 'member', 'result', 'error', 'errors', 'progress', 'progress_message', 'progress_data', 'progress_at',
  'progress_claim', 'unique', 'unique_states', 'unique_until', 'dedup', 'root', 'root_ts', 'root_self', 'superseded',
  'rl_key', 'rl', 'qrl', 'wf', 'wf_i', 'wf_parents', 'parent_results', 'hold_delay_ms', 'flags', 'doc'}
local AT = {}
for i = 1, #FIELDS do AT[FIELDS[i]] = i end

-- tostr(n): an integer as text through string.format('%d') (Lua's own number-to-text is '%.14g', and
-- Redis' for a numeric redis.call argument '%.17g': glibc's float formatting, several times dearer).
local function tostr(n) return string.format('%d', n) end

-- setup(P, n, doc): n waiting jobs in each layout, ids P..'<i>' padded to 36 bytes like a UUID.
redis.register_function('floor_setup', function(_, a)
  local P, n, doc = a[1], tonumber(a[2]), a[3]
  local now = now_ms()
  for i = 1, n do
    local id = string.format('0193a5f2-7c1e-7000-8000-%012d', i)
    local member = '10' .. string.format('%015d', i) .. id
    local f = {
      state = 'available', queue = 'bench', type = 'noop', priority = tostring(i % 10), rank = tostring(i % 10),
      attempt = '0', max_attempts = '3', backoff = 'exponential 1000 2 300000 1', on_exhaustion = 'discard',
      timeout_ms = '0', visibility_ms = '0', created_at = tostring(now), enqueued_at = tostring(now),
      member = member, flags = '0',
    }
    local sys = {}
    for k, v in pairs(f) do
      sys[#sys + 1] = k
      sys[#sys + 1] = v
    end
    redis.call('HSET', P .. 'v3:job:' .. id, unpack(sys))
    redis.call('SET', P .. 'v3:doc:' .. id, doc)
    redis.call('ZADD', P .. 'v3:ready', i % 10, member)
    f.doc = doc
    redis.call('SET', P .. 'v2:job:' .. id, cmsgpack.pack(f))
    redis.call('ZADD', P .. 'v2:ready', i % 10, member)
    redis.call('SET', P .. 'v2n:job:' .. id, cmsgpack.pack(f))
    redis.call('ZADD', P .. 'v2n:ready', i % 10, member)
    local cold = {doc = doc, rank = f.rank, max_attempts = f.max_attempts, backoff = f.backoff,
      on_exhaustion = f.on_exhaustion, created_at = f.created_at, enqueued_at = f.enqueued_at}
    local hot = {state = f.state, queue = f.queue, type = f.type, priority = f.priority, attempt = f.attempt,
      timeout_ms = f.timeout_ms, visibility_ms = f.visibility_ms, member = f.member, flags = f.flags,
      cold = cmsgpack.pack(cold)}
    redis.call('SET', P .. 'v2c:job:' .. id, cmsgpack.pack(hot))
    redis.call('ZADD', P .. 'v2c:ready', i % 10, member)
    local arr = {}
    for j, k in ipairs(FIELDS) do arr[j] = f[k] or false end
    redis.call('SET', P .. 'v2a:job:' .. id, cmsgpack.pack(arr))
    redis.call('ZADD', P .. 'v2a:ready', i % 10, member)
  end
  return n
end)

redis.register_function('floor_fetch_v2', function(_, a)
  local P, worker = a[1], a[2]
  local now = now_ms()
  local popped = redis.call('ZPOPMIN', P .. 'v2:ready')
  if #popped == 0 then return false end
  local id = string.sub(popped[1], -36)
  local jk = P .. 'v2:job:' .. id
  local f = cmsgpack.unpack(redis.call('GET', jk))
  local vt = tonumber(f.visibility_ms) or 0
  if vt == 0 then vt = 30000 end
  local lease = now + vt
  local attempt = (tonumber(f.attempt) or 0) + 1
  local claims = (tonumber(f.claims) or 0) + 1
  f.state, f.started_at, f.lease_until, f.worker_id = 'active', tostring(now), tostring(lease), worker
  f.attempt, f.claims, f.lease_ms, f.member = tostring(attempt), tostring(claims), tostring(vt), nil
  local packed = cmsgpack.pack(f)
  redis.call('SET', jk, packed, 'KEEPTTL')
  redis.call('ZADD', P .. 'active', lease, id)
  redis.call('HINCRBY', P .. 'stats', 'active', 1)
  event(P, 'job.started', id, f.queue, f.type, now, '{"attempt":' .. attempt .. ',"worker_id":"' .. worker .. '"}')
  return {id, packed}
end)

redis.register_function('floor_ack_v2', function(_, a)
  local P, id, result = a[1], a[2], a[3]
  local now = now_ms()
  local jk = P .. 'v2:job:' .. id
  local v = redis.call('GET', jk)
  if not v then return {'not_found'} end
  local f = cmsgpack.unpack(v)
  if f.state ~= 'active' then return {'state', f.state} end
  redis.call('ZREM', P .. 'active', id)
  f.state, f.completed_at, f.result, f.lease_until = 'completed', tostring(now), result, nil
  redis.call('SET', jk, cmsgpack.pack(f), 'PX', '86400000')
  redis.call('HINCRBY', P .. 'stats', 'active', -1)
  redis.call('HINCRBY', P .. 'stats', 'completed', 1)
  event(P, 'job.completed', id, f.queue, f.type, now, '{"attempt":' .. f.attempt .. ',"duration_ms":' ..
    (now - tonumber(f.started_at)) .. '}')
  return {'ok', now, f.attempt}
end)

-- v3's FETCH hands back the envelope and the system fields as they are after the claim: the fields it
-- read, then the ones it wrote (the server's view needs both; no HGETALL).
local V3_READ = {'queue', 'type', 'priority', 'attempt', 'max_attempts', 'claims', 'visibility_ms', 'timeout_ms',
  'flags', 'created_at', 'enqueued_at'}
redis.register_function('floor_fetch_v3', function(_, a)
  local P, worker = a[1], a[2]
  local now = now_ms()
  local popped = redis.call('ZPOPMIN', P .. 'v3:ready')
  if #popped == 0 then return false end
  local id = string.sub(popped[1], -36)
  local jk = P .. 'v3:job:' .. id
  local f = redis.call('HMGET', jk, unpack(V3_READ))
  local vt = tonumber(f[7]) or 0
  if vt == 0 then vt = 30000 end
  local lease = now + vt
  local attempt = (tonumber(f[4]) or 0) + 1
  local claims = (tonumber(f[6]) or 0) + 1
  f[4], f[6] = attempt, claims
  redis.call('HSET', jk, 'state', 'active', 'started_at', now, 'lease_until', lease, 'worker_id', worker,
    'attempt', attempt, 'claims', claims, 'lease_ms', vt)
  redis.call('HDEL', jk, 'member')
  redis.call('ZADD', P .. 'active', lease, id)
  redis.call('HINCRBY', P .. 'stats', 'active', 1)
  event(P, 'job.started', id, f[1], f[2], now, '{"attempt":' .. attempt .. ',"worker_id":"' .. worker .. '"}')
  return {id, redis.call('GET', P .. 'v3:doc:' .. id), f, {now, lease, worker, vt}}
end)

redis.register_function('floor_ack_v3', function(_, a)
  local P, id, result = a[1], a[2], a[3]
  local now = now_ms()
  local jk = P .. 'v3:job:' .. id
  local f = redis.call('HMGET', jk, 'state', 'queue', 'type', 'attempt', 'started_at')
  if not f[1] then return {'not_found'} end
  if f[1] ~= 'active' then return {'state', f[1]} end
  redis.call('ZREM', P .. 'active', id)
  redis.call('HSET', jk, 'state', 'completed', 'completed_at', now, 'result', result)
  redis.call('HDEL', jk, 'lease_until')
  redis.call('PEXPIRE', jk, '86400000')
  redis.call('PEXPIRE', P .. 'v3:doc:' .. id, '86400000')
  redis.call('HINCRBY', P .. 'stats', 'active', -1)
  redis.call('HINCRBY', P .. 'stats', 'completed', 1)
  event(P, 'job.completed', id, f[2], f[3], now, '{"attempt":' .. f[4] .. ',"duration_ms":' ..
    (now - tonumber(f[5])) .. '}')
  return {'ok', now, f[4]}
end)

-- v2n: v2 with every number written as text by tostr (the same commands and record); v2c: the same code
-- on a record whose fields no FETCH or ACK reads (the envelope, rank, retry policy, creation times) are
-- one packed field, 'cold', that these transitions copy as it is.
local function register_text_layout(layout)
  redis.register_function('floor_fetch_' .. layout, function(_, a)
    local P, worker = a[1], a[2]
    local now = now_ms()
    local popped = redis.call('ZPOPMIN', P .. layout .. ':ready')
    if #popped == 0 then return false end
    local id = string.sub(popped[1], -36)
    local jk = P .. layout .. ':job:' .. id
    local f = cmsgpack.unpack(redis.call('GET', jk))
    local vt = tonumber(f.visibility_ms) or 0
    if vt == 0 then vt = 30000 end
    local lease = tostr(now + vt)
    local attempt = tostr((tonumber(f.attempt) or 0) + 1)
    local now_s = tostr(now)
    f.state, f.started_at, f.lease_until, f.worker_id = 'active', now_s, lease, worker
    f.attempt, f.claims, f.lease_ms, f.member = attempt, tostr((tonumber(f.claims) or 0) + 1), tostr(vt), nil
    local packed = cmsgpack.pack(f)
    redis.call('SET', jk, packed, 'KEEPTTL')
    redis.call('ZADD', P .. 'active', lease, id)
    redis.call('HINCRBY', P .. 'stats', 'active', '1')
    event(P, 'job.started', id, f.queue, f.type, now_s, '{"attempt":' .. attempt .. ',"worker_id":"' .. worker .. '"}')
    return {id, packed}
  end)

  redis.register_function('floor_ack_' .. layout, function(_, a)
    local P, id, result = a[1], a[2], a[3]
    local now = now_ms()
    local now_s = tostr(now)
    local jk = P .. layout .. ':job:' .. id
    local v = redis.call('GET', jk)
    if not v then return {'not_found'} end
    local f = cmsgpack.unpack(v)
    if f.state ~= 'active' then return {'state', f.state} end
    redis.call('ZREM', P .. 'active', id)
    f.state, f.completed_at, f.result, f.lease_until = 'completed', now_s, result, nil
    redis.call('SET', jk, cmsgpack.pack(f), 'PX', '86400000')
    redis.call('HINCRBY', P .. 'stats', 'active', '-1')
    redis.call('HINCRBY', P .. 'stats', 'completed', '1')
    event(P, 'job.completed', id, f.queue, f.type, now_s, '{"attempt":' .. f.attempt .. ',"duration_ms":' ..
      tostr(now - tonumber(f.started_at)) .. '}')
    return {'ok', now, f.attempt}
  end)
end
register_text_layout('v2n')
register_text_layout('v2c')

-- v2a: the array record, numbers as text.
redis.register_function('floor_fetch_v2a', function(_, a)
  local P, worker = a[1], a[2]
  local now = now_ms()
  local popped = redis.call('ZPOPMIN', P .. 'v2a:ready')
  if #popped == 0 then return false end
  local id = string.sub(popped[1], -36)
  local jk = P .. 'v2a:job:' .. id
  local f = cmsgpack.unpack(redis.call('GET', jk))
  local vt = tonumber(f[AT.visibility_ms]) or 0
  if vt == 0 then vt = 30000 end
  local lease = tostr(now + vt)
  local attempt = tostr((tonumber(f[AT.attempt]) or 0) + 1)
  local now_s = tostr(now)
  f[AT.state], f[AT.started_at], f[AT.lease_until], f[AT.worker_id] = 'active', now_s, lease, worker
  f[AT.attempt], f[AT.claims], f[AT.lease_ms], f[AT.member] = attempt, tostr((tonumber(f[AT.claims]) or 0) + 1),
    tostr(vt), false
  local packed = cmsgpack.pack(f)
  redis.call('SET', jk, packed, 'KEEPTTL')
  redis.call('ZADD', P .. 'active', lease, id)
  redis.call('HINCRBY', P .. 'stats', 'active', '1')
  event(P, 'job.started', id, f[AT.queue], f[AT.type], now_s, '{"attempt":' .. attempt .. ',"worker_id":"' .. worker .. '"}')
  return {id, packed}
end)

redis.register_function('floor_ack_v2a', function(_, a)
  local P, id, result = a[1], a[2], a[3]
  local now = now_ms()
  local now_s = tostr(now)
  local jk = P .. 'v2a:job:' .. id
  local v = redis.call('GET', jk)
  if not v then return {'not_found'} end
  local f = cmsgpack.unpack(v)
  if f[AT.state] ~= 'active' then return {'state', f[AT.state]} end
  redis.call('ZREM', P .. 'active', id)
  f[AT.state], f[AT.completed_at], f[AT.result], f[AT.lease_until] = 'completed', now_s, result, false
  redis.call('SET', jk, cmsgpack.pack(f), 'PX', '86400000')
  redis.call('HINCRBY', P .. 'stats', 'active', '-1')
  redis.call('HINCRBY', P .. 'stats', 'completed', '1')
  event(P, 'job.completed', id, f[AT.queue], f[AT.type], now_s, '{"attempt":' .. f[AT.attempt] .. ',"duration_ms":' ..
    tostr(now - tonumber(f[AT.started_at])) .. '}')
  return {'ok', now, f[AT.attempt]}
end)
