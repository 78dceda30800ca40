-- rl-gauges-1.lua: the gauges of many rate-limit keys in one call, for a /metrics scrape (read only).
--
-- KEYS
--   KEYS[1] P..'rl:keys'   zset   every rate-limit key, lexicographic (member = key, score 0)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] limit         int(1..100000) how many keys, from the first in lexicographic order
-- RETURNS
--   {'ok', now_ms, key_1, active_1, waiting_1, stats_1, limits_1, ...}   stats_i is the flat
--        field/value array of P..'rl:'..key..':stats'; limits_i is {concurrency, rate_limit,
--        policy_concurrency, policy_rate_limit} ('' where absent): the limits FETCH applies now (the
--        policy under adaptation and any override, Policy.effective) and the key's policy's own
-- COST   O(limit × queues per key)
-- CAPS   ARGV[2] keys; per key, the queues whose lane for it holds jobs (at most the queues there are)
-- CLOCK  Redis TIME
-- INVARIANTS
--   reads only; active, waiting and the limits are computed by the functions rl-inspect-1.lua uses, so
--   a scrape and GET /rate-limits/{key} agree
--@include clock
--@include ratelimit

local P = ARG.P
local now = now_ms()
local reply = {'ok', now}
for _, key in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARG.limit) - 1)) do
  reply[#reply + 1] = key
  reply[#reply + 1] = Conc.active(P, key, now)
  reply[#reply + 1] = Lane.waiting(P, key)
  reply[#reply + 1] = redis.call('HGETALL', key_rl_stats(P, key))
  local pol = Policy.of(P, key, nil) or { on_limit = 'wait' }
  local e = Policy.effective(P, key, pol)
  reply[#reply + 1] = { text(e.conc or ''), text(e.rate_limit or ''), text(pol.conc or ''), text(pol.rate_limit or '') }
end
return reply
