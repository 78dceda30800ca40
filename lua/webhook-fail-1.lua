-- webhook-fail-1.lua: a webhook delivery's attempt failed (an answer other than 2xx, a timeout, a
-- connection error; or its subscription is gone): it is recorded, and the delivery is due again after
-- the delay the server chose, or ends dead (retries exhausted, or an answer not worth retrying) or
-- cancelled (its subscription was deleted), unless a newer claim took it over meanwhile.
--
-- KEYS
--   KEYS[1] P..'wh:d:'..id   hash   the delivery (webhook-fanout-1.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (this shard's)
--   ARGV[2] id            string the delivery's id
--   ARGV[3] attempt       int(1..) the attempt's number, as its claim returned it
--   ARGV[4] outcome       string the attempt's outcome as JSON (status code or error, duration, time)
--   ARGV[5] retry_in_ms   ms?    when to try again, from now; '' = no retry: the delivery ends as `ends_as`
--   ARGV[6] ends_as       'dead'|'cancelled' how it ends without a retry
--   ARGV[7] keep_ms       ms     how long the delivery stays readable
-- RETURNS
--   {'ok', state, next_at}   recorded; state 'retrying' (due again at next_at), 'dead' or 'cancelled'
--                            (next_at 0)
--   {'stale', state}         recorded, but a newer claim holds the delivery: its state is left to it
--   {'not_found'}            the delivery's record expired; nothing written
-- COST   O(log n)
-- CAPS   no loop
-- CLOCK  Redis TIME (the next due time, ended_at)
-- INVARIANTS
--   every attempt's outcome is recorded (the newest 50 are kept); only the claim holding the newest
--   attempt number reschedules or ends a delivery; a retrying delivery is in P..'wh:due' at its next
--   time, an ended one is out of it and expires after keep_ms
--@include clock

local P, id = ARG.P, ARG.id
local dk = KEYS[1]
local f = redis.call('HMGET', dk, 'attempts', 'state')
if not f[1] then return {'not_found'} end
local keep = tonumber(ARG.keep_ms)
local ak = key_webhook_attempts(P, id)
redis.call('RPUSH', ak, ARG.outcome)
redis.call('LTRIM', ak, -50, -1)
redis.call('PEXPIRE', ak, keep)
if tonumber(f[1]) ~= tonumber(ARG.attempt) or f[2] ~= 'delivering' then return {'stale', f[2]} end
local now = now_ms()
local due = key_webhook_due(P)
if ARG.retry_in_ms ~= '' then
  local next_at = now + tonumber(ARG.retry_in_ms)
  redis.call('HSET', dk, 'state', 'retrying', 'next_at', next_at)
  redis.call('ZADD', due, next_at, id)
  redis.call('PEXPIRE', dk, math.max(keep, tonumber(ARG.retry_in_ms) + keep))
  return {'ok', 'retrying', next_at}
end
redis.call('HSET', dk, 'state', ARG.ends_as, 'ended_at', now)
redis.call('HDEL', dk, 'next_at')
redis.call('ZREM', due, id)
redis.call('PEXPIRE', dk, keep)
return {'ok', ARG.ends_as, 0}
