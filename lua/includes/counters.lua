-- Counters (the per-queue gauges and counts of includes/active.lua and includes/ready.lua): count() adds
-- a delta that is summed per call and written when the call ends (count_flush, from record.lua's
-- rec_end) with one HINCRBY per field that moved, so a claim's +1 and an ACK's -1 of 'active' in one
-- group-commit call write nothing. A field counted with
-- drop_at_zero is deleted when it reaches 0 or less. A script that reads such a counter adds
-- count_pending(key) (see includes/create.lua's depth).
--@include text
-- CAPS: its loops visit the counters this call moved (a few per queue the call touched).
local CNT, CNT_DROP, CNT_ONCE = {}, {}, {}

local function count_begin()
  CNT, CNT_DROP, CNT_ONCE = {}, {}, {}
end

-- first_in_call(name): true the first time this call asks about `name`, false after (a per-call memo:
-- e.g. a key whose expiry the call sets once; the library's top level outlives calls, so such a memo
-- lives here, where every call starts afresh).
local function first_in_call(name)
  if CNT_ONCE[name] then return false end
  CNT_ONCE[name] = true
  return true
end

local function count(key, field, delta, drop_at_zero)
  local c = CNT[key]
  if not c then
    c = {}
    CNT[key] = c
  end
  c[field] = (c[field] or 0) + delta
  if drop_at_zero then CNT_DROP[key] = true end
end

-- count_pending(key, field): the delta of key's field not yet written (field nil: of all its fields).
local function count_pending(key, field)
  local c = CNT[key]
  if not c then return 0 end
  if field then return c[field] or 0 end
  local sum = 0
  for _, d in pairs(c) do sum = sum + d end
  return sum
end

-- incr(key, field, n): HINCRBY of a hash's counter that cannot fail (issue 40: it may come after other
-- writes of the transition): a field something other than this library left as no integer restarts at n,
-- logged, instead of failing the transition half done. Returns the new value.
local function incr(key, field, n)
  local v = redis.pcall('HINCRBY', key, field, n)
  if type(v) ~= 'number' then
    redis.log(redis.LOG_WARNING, 'ojs: counter ' .. key .. ' ' .. field .. ' was no integer; it restarts at ' .. n)
    redis.call('HSET', key, field, n)
    v = tonumber(n)
  end
  return v
end

-- count_flush(): writes every counter that moved in this call (through incr: it runs after the call's
-- other writes and cannot fail).
local function count_flush()
  for key, c in pairs(CNT) do
    for field, d in pairs(c) do
      if d ~= 0 then
        local v = incr(key, field, text(d))
        if CNT_DROP[key] and v <= 0 then redis.call('HDEL', key, field) end
      end
    end
  end
  CNT, CNT_DROP = {}, {}
end
