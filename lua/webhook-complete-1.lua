-- webhook-complete-1.lua: a webhook delivery's attempt succeeded (a 2xx answer): it is recorded, and the
-- delivery ends delivered, unless a newer claim took it over meanwhile.
--
-- KEYS
--   KEYS[1] P..'wh:d:'..id   hash   the delivery (webhook-fanout-1.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (this shard's)
--   ARGV[2] id            string the delivery's id
--   ARGV[3] attempt       int(1..) the attempt's number, as its claim returned it
--   ARGV[4] outcome       string the attempt's outcome as JSON (status code, duration, time), from the server
--   ARGV[5] keep_ms       ms     how long the ended delivery stays readable
-- RETURNS
--   {'ok', now}           recorded; the delivery is delivered
--   {'stale', state}      recorded, but a newer claim holds the delivery (this pod's lease had lapsed):
--                         its state is left to that claim
--   {'not_found'}         the delivery's record expired; nothing written
-- COST   O(log n)
-- CAPS   no loop
-- CLOCK  Redis TIME (ended_at)
-- INVARIANTS
--   every attempt's outcome is recorded (the newest 50 are kept); only the claim holding the newest
--   attempt number ends a delivery; an ended delivery is out of P..'wh:due' and expires after keep_ms
--@include clock

local P, id = ARG.P, ARG.id
local dk = KEYS[1]
local f = redis.call('HMGET', dk, 'attempts', 'state')
if not f[1] then return {'not_found'} end
local ak = key_webhook_attempts(P, id)
redis.call('RPUSH', ak, ARG.outcome)
redis.call('LTRIM', ak, -50, -1)
redis.call('PEXPIRE', ak, tonumber(ARG.keep_ms))
if tonumber(f[1]) ~= tonumber(ARG.attempt) or f[2] ~= 'delivering' then return {'stale', f[2]} end
local now = now_ms()
redis.call('HSET', dk, 'state', 'delivered', 'ended_at', now)
redis.call('HDEL', dk, 'next_at')
redis.call('ZREM', key_webhook_due(P), id)
redis.call('PEXPIRE', dk, tonumber(ARG.keep_ms))
return {'ok', now}
