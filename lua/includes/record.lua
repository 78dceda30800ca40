-- Job records (key schema v3). P..'job:'..id is one STRING: the job's fields (name -> string value)
-- packed as one MessagePack map (cmsgpack). One compact value per job stays small whatever its size
-- (migrations-notes/README.md, version 2: 560 B per queued job where a v1 hash took 912 B).
--
-- v3 splits the map in two. The fields no FETCH, ACK, heartbeat or promote reads (REC_COLD: the client's
-- envelope `doc` and the retry policy) are packed once, by the server (the enqueue's arguments carry them
-- so), into ONE field, `cold`, a MessagePack map of their own; every other field sits in the outer map. A
-- transition unpacks and re-packs only the outer map and copies `cold` as it is, unless it reads or writes
-- one of REC_COLD through rec(): the first such command in a call unpacks `cold` into the record, and the
-- write packs them apart again. rec_map and rec_update hand out the outer map as it is (no metatable: one
-- on every record made each absent field a function call, which cost half of what the split saves,
-- benches/RESULTS.md), so the hot paths that use them read no cold field. A record without `cold` (written
-- by a v2 server) reads the same, its fields all in the outer map, and is split when it is next written.
-- The server reads `cold` the same way (crates/ojs-store/src/reply.rs decode_record).
--
-- Scripts touch a job only through rec(cmd, key, ...), which answers the hash commands scripts used on
-- v1 (HGET, HMGET, HSET, HDEL, HINCRBY, HEXISTS, HGETALL, EXISTS, DEL, PEXPIRE) exactly as redis.call
-- would (missing values are false, counts are numbers), or rec_map/rec_update (below), from a per-call
-- cache: a record is read (GET + unpack) at most once per call and written (pack + SET) at most once,
-- when the call ends. Every function of the library is wrapped by build.rs as rec_begin(); ...;
-- rec_end(reply), so nothing cached outlives its call. A v1 hash found in place of a record (a keyspace
-- not yet migrated) is read with HGETALL and written back as a record, keeping its TTL.
--
-- INVARIANTS: a job key holds a record (or, before migration, a v1 hash), never anything else; a
-- record's values are strings, as a hash's were; a field lives either in the outer map or in `cold`,
-- never in both; the writes reach Redis before the call returns, in the same script as every other
-- write of the transition.
-- CAPS: its loops visit the records this call touched, each record's fields and REC_COLD (5 names).
--@include text
--@include emit
--@include counters
local REC = {}

-- The cold fields (see above): the server packs exactly these for a new job (crates/ojs-store
-- ops/enqueue.rs ColdFields, whose test reads this line), and the invariant checker (crates/ojs-testkit)
-- refuses a record split otherwise.
local REC_COLD = {'doc', 'max_attempts', 'backoff', 'on_exhaustion', 'non_retryable'}
local REC_IS_COLD = {}
for i = 1, #REC_COLD do REC_IS_COLD[REC_COLD[i]] = true end

-- rec_cold_check(c): nil when the cold fields c can be used, else what is wrong (see rec_check below).
local function rec_cold_check(c)
  if type(c) ~= 'table' then return 'cold is not a map of fields' end
  local m = c.max_attempts
  if m ~= nil and not (tonumber(m) and tonumber(m) % 1 == 0) then return 'max_attempts is not an integer' end
  if c.backoff ~= nil and type(c.backoff) ~= 'string' then return 'backoff is not text' end
  if c.non_retryable ~= nil then
    local ok, list = pcall(cjson.decode, c.non_retryable)
    if not ok or type(list) ~= 'table' then return 'non_retryable is not a JSON list' end
    for _, pat in ipairs(list) do
      if type(pat) ~= 'string' then return 'non_retryable holds a pattern that is not text' end
    end
  end
  return nil
end

-- rec_open(f): moves the fields packed in f.cold into f itself (nothing when there are none). Cold fields
-- that cannot be used raise an error: the first read of one comes before a transition's first write.
local function rec_open(f)
  local c = f.cold
  if c == nil then return end
  local ok, fields = pcall(cmsgpack.unpack, c)
  local bad = 'cold does not unpack'
  if ok then bad = rec_cold_check(fields) end
  if bad then error('ERR job record is corrupt: ' .. bad, 0) end
  f.cold = nil
  for k, v in pairs(fields) do f[k] = v end
end

-- rec_pack(f): the record as stored. The cold fields found in f itself (a record whose `cold` was
-- opened, one a v2 server wrote, or one made by HSET) go into `cold` first; a record whose `cold` is
-- still packed is packed as it is.
local function rec_pack(f)
  if f.cold == nil then
    local c, any = {}, false
    for i = 1, #REC_COLD do
      local k = REC_COLD[i]
      local v = f[k]
      if v ~= nil then
        c[k] = v
        f[k] = nil
        any = true
      end
    end
    if any then f.cold = cmsgpack.pack(c) end
  end
  return cmsgpack.pack(f)
end

-- CALL_MEMO: what a call reads once and uses many times (name -> value; a name includes the key
-- prefix P of what it memoizes, so that two namespaces sharing a Redis never share a value). Reset by
-- rec_begin: nothing in it outlives its call (build.rs checks that only the call's begins assign it).
local CALL_MEMO = {}

-- rec_begin(): a call starts with no cached record, no counter moved, no event and an empty memo
-- (build.rs runs it before every function's body; rec_end after it).
local function rec_begin()
  REC = {}
  CALL_MEMO = {}
  count_begin()
  emit_begin()
end

-- Record values are strings, as a hash's were (includes/text.lua).
local rec_str = text

-- What a record must hold to be used (issue 40: stored state is not trusted blindly). A record that does
-- not, or a value that does not unpack to one, is corrupt: written by something other than this library
-- (an operator's edit, a bug of an older build). rec_load marks it (e.bad, the reason) and every read of
-- it (rec, rec_map, rec_update, rec_packed) then raises an error, which a script meets before its first
-- write for the job it was called for; a script that meets other jobs after writing (FETCH's pops, the
-- timers' due jobs and leases, a group commit's later ACKs) asks rec_bad(key) first and sets the job
-- aside (rec_quarantine, includes/active.lua) instead.
local REC_STATES = {scheduled = true, available = true, pending = true, active = true, completed = true,
  retryable = true, cancelled = true, discarded = true}

-- rec_check(f): nil when the fields f are a record scripts can use, else what is wrong. It reads no number
-- (each tonumber of a 13-digit time is a glibc strtod: checking a record's numbers at every load cost
-- more than the rest of a claim's Lua, benches/RESULTS.md eighteenth session); a script turns a field
-- into a number where it uses it, with a default for one that is not, and checks what it computes
-- (finite) before it writes it. The fuzzer (tests/atomicity.rs) holds them to that.
-- Every record holds `queue`, `type` and `priority` as text (`priority` names a counter field:
-- includes/ready.lua).
local function rec_check(f)
  if type(f) ~= 'table' then return 'not a map of fields' end
  if not REC_STATES[f.state] then return 'state ' .. tostring(f.state) .. ' is no job state' end
  -- Written out, not a loop over a list: this runs at every load of a record.
  local q, t, p = f.queue, f.type, f.priority
  if type(q) ~= 'string' or q == '' then return 'queue is missing' end
  if type(t) ~= 'string' or t == '' then return 'type is missing' end
  if type(p) ~= 'string' or p == '' then return 'priority is missing' end
  if f.cold ~= nil and type(f.cold) ~= 'string' then return 'cold is not packed' end
  -- A workflow member's place: its index, or a callback's name (includes/workflow.lua).
  local wi = f.wf_i
  if wi ~= nil and not (wi == 'on_complete' or wi == 'on_success' or wi == 'on_failure'
      or (tonumber(wi) and tonumber(wi) % 1 == 0 and tonumber(wi) >= 0 and tonumber(wi) < 100000)) then
    return 'wf_i is no member index and no callback'
  end
  return nil
end

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
    local ok, f = pcall(cmsgpack.unpack, v)
    e = {f = ok and f}
  else
    e = {f = false, fresh = true}
  end
  if e.f ~= false then
    e.bad = rec_check(e.f)
    if e.bad then e.f = false end
  end
  REC[key] = e
  return e
end

-- rec_bad(key, cold): why the job at key is corrupt, or nil (none, or a usable record); with `cold`, its
-- cold fields are opened and checked too (a script that reads them after a write asks so).
local function rec_bad(key, cold)
  local e = rec_load(key)
  if cold and not e.bad and e.f and e.f.cold ~= nil then
    local ok, fields = pcall(cmsgpack.unpack, e.f.cold)
    e.bad = ok and rec_cold_check(fields) or (not ok and 'cold does not unpack') or nil
    if e.bad then e.f = false end
  end
  return e.bad
end

-- rec_quarantine(P, id, why, now): the job id, whose record is corrupt (rec_bad: why), was met by a script
-- after a write and is set aside, its record untouched: P..'corrupt' lists it (scored by when), which
-- nothing serves; the server's log and redis-cli show it to an operator, who mends or deletes it.
local function rec_quarantine(P, id, why, now)
  redis.call('ZADD', key_corrupt(P), now, id)
  redis.log(redis.LOG_WARNING, 'ojs: job ' .. id .. ' set aside in ' .. key_corrupt(P) .. ': its record ' .. why)
end

-- rec_use(key): the cache entry of a record a script is about to use: a corrupt one raises an error.
local function rec_use(key)
  local e = rec_load(key)
  if e.bad then error('ERR job record ' .. key .. ' is corrupt: ' .. e.bad, 0) end
  return e
end

local REC_READS = {HGET = true, HMGET = true, HEXISTS = true, HGETALL = true, EXISTS = true}
-- For each command that names fields: the last argument that may be a field name, and the step between
-- them (HSET's arguments are name, value, ...); -1: every argument.
local REC_NAMES = {HGET = {1, 1}, HMGET = {-1, 1}, HSET = {-1, 2}, HDEL = {-1, 1}, HINCRBY = {1, 1},
  HEXISTS = {1, 1}}

-- rec(cmd, key, ...): the hash command cmd on the job record at key (see above).
local function rec(cmd, key, ...)
  local e = rec_use(key)
  local f = e.f
  local a = {...}
  if not REC_READS[cmd] then e.packed = nil end
  -- A cold field is read or written in the record itself: open `cold` first.
  if f and f.cold ~= nil then
    if cmd == 'HGETALL' then
      rec_open(f)
    else
      local names = REC_NAMES[cmd]
      if names then
        local last = names[1] < 0 and #a or names[1]
        for i = 1, last, names[2] do
          if REC_IS_COLD[a[i]] then
            rec_open(f)
            break
          end
        end
      end
    end
  end
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
-- It shows the outer map as stored: read no field of REC_COLD through it (rec() opens `cold` for them).
local function rec_map(key)
  return rec_use(key).f
end

-- rec_update(key): the cached map of an existing job, to change in place (values must be strings: use
-- text() for numbers; a field set to nil is deleted); the record is written when the call ends, as
-- after rec('HSET', ...). False when there is no job (nothing is created). Like rec_map, for fields
-- outside REC_COLD only.
local function rec_update(key)
  local e = rec_use(key)
  if not e.f then return false end
  e.dirty = true
  e.packed = nil
  return e.f
end

-- rec_put(key, f): a new job's record is exactly the fields f (name -> string value), with no TTL; the
-- enqueue script's fast path (it has already checked that key holds no job).
local function rec_put(key, f)
  local e = rec_load(key)
  e.bad = nil
  e.f = f
  e.dirty = true
  e.fresh = true
  e.ttl = nil
  e.packed = nil
end

-- rec_packed(key): the record as it stands, packed (false for no job); when nothing changes it
-- afterwards, rec_end writes this very string, so a script that returns a job it wrote packs it once.
local function rec_packed(key)
  local e = rec_use(key)
  if not e.f then return false end
  e.packed = e.packed or rec_pack(e.f)
  return e.packed
end

-- rec_convert(key): whether the job at key is written back in this schema when the call ends (a v1
-- hash, or a record whose cold fields are in the outer map, as v2 wrote them); job-migrate-1.lua's step.
local function rec_convert(key)
  local e = rec_load(key)
  local f = e.f
  if not f then return false end
  if e.dirty then return true end
  if f.cold ~= nil then return false end
  for i = 1, #REC_COLD do
    if f[REC_COLD[i]] ~= nil then
      e.dirty = true
      return true
    end
  end
  return false
end

-- rec_end(reply): writes the counters, every changed record (a new or deleted-and-recreated one without the old TTL,
-- an updated one keeping its TTL, PEXPIRE applied), then the call's events (emit.lua), and returns
-- reply.
local function rec_end(reply)
  for key, e in pairs(REC) do
    if e.f and e.dirty then
      local v = e.packed or rec_pack(e.f)
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
