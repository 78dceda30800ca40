-- rl-inspect-1.lua: what FETCH would apply to a rate-limit key now, and its live state (read only).
--
-- KEYS
--   KEYS[1] P..'rl:'..key..':policy'   string   the key's registry policy (includes/ratelimit.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] key           string the rate-limit key
-- RETURNS
--   {'ok', now_ms, known, limits, state, override, episode, stats, adaptive}
--     known     1 when the key was ever used (P..'rl:keys'), else 0
--     limits    {concurrency, rate_limit, rate_period_ms, throttle_limit, throttle_period_ms, on_limit,
--               floor} the effective limits FETCH applies (Policy.effective over Policy.of), and the
--               policy's floor (ratelimit.lua "Burstable concurrency"), '' where absent
--     state     {active, window_count, window_oldest_ms, throttle_next_ms, dynamic_until_ms, waiting,
--               override_ttl_ms}: -1 where there is nothing (no window entry, no throttle state…);
--               active and window_count in units (jobs' costs, ratelimit.lua "Costs": the count of
--               holders and starts when every job costs 1)
--     override, episode, stats   flat field/value arrays of P..'rl:'..key..':ovr', ':state', ':stats'
--     adaptive  {} for a key whose policy is not adaptive; else {policy_concurrency, policy_rate_limit,
--               increase_after, adapt} ('' where absent): the policy's own limits, and the flat
--               field/value array of P..'rl:'..key..':adapt' (includes/ratelimit.lua "Adaptive")
-- COST   O(queues with a lane for the key + log n)
-- CAPS   the queues whose lane for the key holds jobs (at most the queues there are); expired window
--        entries and lapsed holders looked at: RL_PRUNE_MAX each (ratelimit.lua)
-- CLOCK  Redis TIME
-- INVARIANTS
--   reads only; the limits are computed by the same functions as fetch-1.lua's, so inspection shows
--   exactly what FETCH applies
--@include clock
--@include ratelimit

local P, key = ARG.P, ARG.key
local now = now_ms()
local known = redis.call('ZSCORE', key_rl_keys(P), key) and 1 or 0
local pol = Policy.of(P, key, nil) or { on_limit = 'wait' }
local e = Policy.effective(P, key, pol)
local function opt(v) return v and tostring(v) or '' end
local limits = { opt(e.conc), opt(e.rate_limit), opt(e.rate_period), opt(e.throttle_limit), opt(e.throttle_period),
  e.on_limit or 'wait', opt(e.floor) }

-- The units counters of a key whose jobs carry costs (ratelimit.lua "Costs"); nil for one whose don't.
local units = redis.call('MGET', key_rl_win_units(P, key), key_rl_active_units(P, key))
local active = Conc.held_units(P, key, now, units[2])
local wcount, woldest = 0, -1
if e.rate_limit and e.rate_period then
  wcount = Window.units(P, key, e.rate_period, now, units[1], false)
  local first = redis.call('ZRANGE', key_rl_win(P, key), '(' .. (now - e.rate_period), '+inf', 'BYSCORE', 'LIMIT', 0, 1,
    'WITHSCORES')
  if first[2] then woldest = tonumber(first[2]) end
end
local tnext = -1
if e.throttle_limit and e.throttle_period then
  tnext = math.max(Throttle.allowed(P, key, Throttle.interval(e)), now)
end
local until_ms = tonumber(redis.call('GET', key_rl_until(P, key)) or '-1')
if until_ms <= now then until_ms = -1 end
local waiting = Lane.waiting(P, key)
local state = { active, wcount, woldest, tnext, until_ms, waiting, redis.call('PTTL', key_rl_ovr(P, key)) }
local adaptive = {}
if pol.adapt then
  adaptive = { opt(pol.conc), opt(pol.rate_limit), opt(pol.adapt.after), redis.call('HGETALL', key_rl_adapt(P, key)) }
end
return {'ok', now, known, limits, state, redis.call('HGETALL', key_rl_ovr(P, key)),
  redis.call('HGETALL', key_rl_state(P, key)), redis.call('HGETALL', key_rl_stats(P, key)), adaptive}
