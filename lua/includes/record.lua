-- Job records (key schema v2). P..'job:'..id is one STRING: the job's fields (name -> string value, the
-- same fields v1 kept in a hash) packed as one MessagePack map (cmsgpack). One compact value per job
-- stays small whatever its size (a v1 hash left Redis' listpack encoding as soon as one value passed
-- hash-max-listpack-value, 64 bytes by default, which a ~100-byte args payload always does): measured
-- 560 B per queued job instead of 912 B (migrations-notes/README.md).
--
-- Scripts touch a job only through rec(cmd, key, ...), which answers the hash commands scripts used on
-- v1 (HGET, HMGET, HSET, HDEL, HINCRBY, HEXISTS, HGETALL, EXISTS, DEL, PEXPIRE) exactly as redis.call
-- would (missing values are false, counts are numbers), from a per-call cache: a record is read (GET +
-- unpack) at most once per call and written (pack + SET) at most once, when the call ends. Every
-- function of the library is wrapped by build.rs as rec_begin(); ...; rec_end(reply), so nothing
-- cached outlives its call. A v1 hash found in place of a record (a keyspace not yet migrated) is read
-- with HGETALL and written back as a record, keeping its TTL.
--
-- INVARIANTS: a job key holds a record (or, before migration, a v1 hash), never anything else; a
-- record's values are strings, as a hash's were; the writes reach Redis before the call returns, in the
-- same script as every other write of the transition.
-- CAPS: its loops visit the records this call touched and each record's fields.
--@include text
--@include emit
--@include counters
local REC = {}

-- rec_begin(): a call starts with no cached record, no counter moved and no event (build.rs runs it
-- before every function's body; rec_end after it).
local function rec_begin()
  REC = {}
  count_begin()
  emit_begin()
end

-- Record values are strings, as a hash's were (includes/text.lua).
local rec_str = text

local function rec_load(key)
  local e = REC[key]
  if e then return e end
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    -- A v1 hash: read it and write it back as a record at the end of this call.
    local h = redis.call('HGETALL', key)
    local f = {}
    for i = 1, #h, 2 do f[h[i]] = h[i + 1] end
    e = {f = f, dirty = true}
  elseif v then
    e = {f = cmsgpack.unpack(v)}
  else
    e = {f = false, fresh = true}
  end
  REC[key] = e
  return e
end

local REC_READS = {HGET = true, HMGET = true, HEXISTS = true, HGETALL = true, EXISTS = true}

-- rec(cmd, key, ...): the hash command cmd on the job record at key (see above).
local function rec(cmd, key, ...)
  local e = rec_load(key)
  local f = e.f
  local a = {...}
  if not REC_READS[cmd] then e.packed = nil end
  if cmd == 'HGET' then
    return f and f[a[1]] or false
  elseif cmd == 'HMGET' then
    local out = {}
    for i = 1, #a do out[i] = f and f[a[i]] or false end
    return out
  elseif cmd == 'HSET' then
    if not f then
      f = {}
      e.f = f
    end
    local added = 0
    for i = 1, #a, 2 do
      if f[a[i]] == nil then added = added + 1 end
      f[a[i]] = rec_str(a[i + 1])
    end
    e.dirty = true
    return added
  elseif cmd == 'HDEL' then
    local n = 0
    if f then
      for i = 1, #a do
        if f[a[i]] ~= nil then
          f[a[i]] = nil
          n = n + 1
        end
      end
      if n > 0 then e.dirty = true end
    end
    return n
  elseif cmd == 'HINCRBY' then
    if not f then
      f = {}
      e.f = f
    end
    local v = (tonumber(f[a[1]]) or 0) + a[2]
    f[a[1]] = rec_str(v)
    e.dirty = true
    return v
  elseif cmd == 'HEXISTS' then
    return (f and f[a[1]] ~= nil) and 1 or 0
  elseif cmd == 'HGETALL' then
    local out = {}
    if f then
      for k, v in pairs(f) do
        out[#out + 1] = k
        out[#out + 1] = v
      end
    end
    return out
  elseif cmd == 'EXISTS' then
    return f and 1 or 0
  elseif cmd == 'DEL' then
    if not f then return 0 end
    e.f = false
    e.dirty = true
    e.fresh = true
    e.ttl = nil
    return 1
  elseif cmd == 'PEXPIRE' then
    if not f then return 0 end
    e.ttl = tonumber(a[1])
    return 1
  end
  error('rec: unsupported command ' .. tostring(cmd))
end

-- rec_map(key): the job's fields as the cached map itself (name -> string value; false for no job),
-- for the hot paths that read many fields at once: a field is a table lookup, and no table is built
-- per read as rec('HMGET', ...) builds two. Read it only; change a record with rec_update or rec().
local function rec_map(key)
  return rec_load(key).f
end

-- rec_update(key): the cached map of an existing job, to change in place (values must be strings: use
-- text() for numbers; a field set to nil is deleted); the record is written when the call ends, as
-- after rec('HSET', ...). False when there is no job (nothing is created).
local function rec_update(key)
  local e = rec_load(key)
  if not e.f then return false end
  e.dirty = true
  e.packed = nil
  return e.f
end

-- rec_put(key, f): a new job's record is exactly the fields f (name -> string value), with no TTL; the
-- enqueue script's fast path (it has already checked that key holds no job).
local function rec_put(key, f)
  local e = rec_load(key)
  e.f = f
  e.dirty = true
  e.fresh = true
  e.ttl = nil
  e.packed = nil
end

-- rec_packed(key): the record as it stands, packed (false for no job); when nothing changes it
-- afterwards, rec_end writes this very string, so a script that returns a job it wrote packs it once.
local function rec_packed(key)
  local e = rec_load(key)
  if not e.f then return false end
  e.packed = e.packed or cmsgpack.pack(e.f)
  return e.packed
end

-- rec_end(reply): writes the counters, every changed record (a new or deleted-and-recreated one without the old TTL,
-- an updated one keeping its TTL, PEXPIRE applied), then the call's events (emit.lua), and returns
-- reply.
local function rec_end(reply)
  for key, e in pairs(REC) do
    if e.f and e.dirty then
      local v = e.packed or cmsgpack.pack(e.f)
      if e.ttl then
        redis.call('SET', key, v, 'PX', text(e.ttl))
      elseif e.fresh then
        redis.call('SET', key, v)
      else
        redis.call('SET', key, v, 'KEEPTTL')
      end
    elseif e.f and e.ttl then
      redis.call('PEXPIRE', key, text(e.ttl))
    elseif e.dirty then
      redis.call('DEL', key)
    end
  end
  count_flush()
  REC = {}
  emit_flush()
  return reply
end
