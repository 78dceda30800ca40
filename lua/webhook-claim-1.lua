-- webhook-claim-1.lua: a pod claims the shard's due webhook deliveries, each with a lease: the claim
-- moves the delivery's due time to the lease's end, so a pod that stops mid-delivery leaves it due
-- again when the lease lapses, and another pod's claim takes it over.
--
-- KEYS
--   KEYS[1] P..'wh:due'   zset   the shard's deliveries by due time (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (this shard's)
--   ARGV[2] count         int(1..1000) the most deliveries to claim
--   ARGV[3] lease_ms      ms     how long the claim holds a delivery (the request's timeout and a margin)
-- RETURNS
--   {'ok', now, id1, attempt1, sub1, event_type1, body1, id2, …}   the claimed deliveries, oldest due
--                         first; attempt: this attempt's number (1 for the first), the claim's fence
-- COST   O(c log n) for c claimed
-- CAPS   the loop takes at most count due deliveries (and drops those whose record expired)
-- CLOCK  Redis TIME (due times, leases)
-- INVARIANTS
--   every claim counts an attempt (one whose pod stopped before it recorded an outcome too, so a
--   delivery is tried at most as often as the server allows); a claimed delivery stays in P..'wh:due',
--   due when its lease lapses; only the claim holding the newest attempt number may end it
--   (webhook-complete-1.lua, webhook-fail-1.lua)
--@include clock

local P = ARG.P
local now = now_ms()
local lease_until = now + tonumber(ARG.lease_ms)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARG.count))
local out = {'ok', now}
for _, id in ipairs(ids) do
  local dk = key_webhook_delivery(P, id)
  local f = redis.call('HMGET', dk, 'sub', 'event_type', 'body')
  if not f[1] then
    redis.call('ZREM', KEYS[1], id)
  else
    local attempt = redis.call('HINCRBY', dk, 'attempts', 1)
    redis.call('HSET', dk, 'state', 'delivering', 'next_at', lease_until)
    redis.call('ZADD', KEYS[1], lease_until, id)
    out[#out + 1] = id
    out[#out + 1] = attempt
    out[#out + 1] = f[1]
    out[#out + 1] = f[2]
    out[#out + 1] = f[3]
  end
end
return out
