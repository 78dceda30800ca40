-- rl-override-1.lua: set or clear an operator override of a rate-limit key's limits.
--
-- KEYS
--   KEYS[1] P..'rl:'..key..':ovr'   hash   the override (fields concurrency, rate_limit, rate_period,
--                                          throttle_limit, throttle_period; absent = the jobs' own)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] key           string the rate-limit key
--   ARGV[3] expires_at    int(-1..99999999999999) ms when the override lapses (0 = never); '-1' clears the override
--   ARGV[4..] field, value pairs to set
-- RETURNS
--   {'ok', now_ms}
--   {'past', now_ms}      expires_at is not after Redis TIME: nothing was changed
-- COST   O(queues with a lane for the key); a key whose policy has a floor re-computes what it owes
--        its pools (ratelimit.lua Pool.sync_all: a ZCOUNT, an SMEMBERS, per lane a few reads and, when
--        its part changes, the writes and a ZPOPMIN of the pool's waiting lanes)
-- CAPS   the fields given (at most 5); the queues whose lane for the key holds jobs (at most the
--        queues there are)
-- CLOCK  Redis TIME
-- INVARIANTS
--   the override replaces the previous one as a whole; every parked lane of the key is re-opened in
--   the same script, so a raised (or cleared) limit takes effect at the next FETCH, and a lowered one
--   re-parks the lane at its next FETCH; a floor above the new concurrency is owed only up to it;
--   a key no job uses goes idle here like one whose last job left (includes/ratelimit.lua): listed while
--   its override lasts, then dropped from P..'rl:keys' by the timer
--@include clock
--@include emit
--@include ratelimit

local P, key = ARG.P, ARG.key
arg_layout('rl_override', (#ARGV - ARG.REST + 1) % 2 == 0, 'field, value pairs')
local now = now_ms()
local expires = tonumber(ARG.expires_at)
if expires > 0 and expires <= now then return {'past', now} end
redis.call('DEL', KEYS[1])
if ARG.expires_at ~= '-1' then
  local pairs_ = {}
  for i = ARG.REST, #ARGV do pairs_[#pairs_ + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'set_at', now, unpack(pairs_))
  if ARG.expires_at ~= '0' then redis.call('PEXPIREAT', KEYS[1], tonumber(ARG.expires_at)) end
  redis.call('ZADD', key_rl_keys(P), 0, key)
end
Lane.wake_all(P, key, now)
-- The override moved the key's concurrency: a floor above it is owed only up to it (ratelimit.lua,
-- "Burstable concurrency").
local pol = Policy.of(P, key, nil)
if pol and pol.floor then Pool.sync_all(P, key, Policy.effective(P, key, pol), now) end
-- A key no job uses is idle: listed while its override lasts, then dropped (includes/ratelimit.lua).
Lane.maybe_idle(P, key)
return {'ok', now}
