-- Adaptive limits (ours, beyond the seed; how the pieces fit: includes/ratelimit.lua).
-- Adaptive (ours, beyond the seed). A key whose policy is adaptive keeps, in P..'rl:'..K..':adapt', its
-- effective concurrency and window limit while they are below the policy's ('concurrency',
-- 'rate_limit'), when it last went down ('down_at'), how many times it did ('round') and the successes
-- since ('ok'). A NACK that reports a rate limit (rate_limit_until, or an error type the policy names)
-- halves both, never below 1, and once per round: a claim of an adaptive key keeps the round it started
-- in (the job's 'rl_round'), and a job that started before the last decrease ran under the old limit
-- and does not halve it again (Adapt.down); every increase_after ACKs raise them one step, the concurrency by 1
-- and the window by a tenth of the policy's limit, up to the policy, where the fields leave
-- (Adapt.up); a success counts toward a step only while the key's slots are all taken (when only
-- its concurrency is below the policy's), so an idle key does not creep back up untested.
-- Policy.effective applies them under the operator's override, which wins over both. Each
-- move is a rate_limit.adjusted event. A key whose policy is not adaptive never reads the hash; it
-- expires RL_IDLE_MS after its last move.
-- Burstable concurrency (ours, beyond the seed). A key with a floor F (the job's policy, 'f' token) and
-- CAPS: an adaptive step's limits (2).
--@include rl_lanes
--@include counters

local Adapt = {}

-- Adapt.down(P, key, pol, round, now, id, queue, jtype): job id of key K, whose policy pol is
-- adaptive and which started in round `round` (its 'rl_round'), met a rate limit downstream: halve K's
-- effective concurrency and window limit, unless the job started before the last decrease.
function Adapt.down(P, key, pol, round, now, id, queue, jtype)
  local ak = key_rl_adapt(P, key)
  local a = redis.call('HMGET', ak, 'concurrency', 'rate_limit', 'round')
  if (a[3] or '0') ~= (round or '0') then return end
  -- Two limits: the concurrency and the window.
  for _, st in ipairs({ { 'concurrency', 'concurrency', a[1], pol.conc }, { 'rate_limit', 'rate', a[2], pol.rate_limit } }) do
    local field, strategy, limit = st[1], st[2], st[4]
    if limit and limit >= 1 then
      local cur = tonumber(st[3]) or limit
      local to = math.max(1, math.floor(cur / 2))
      if to ~= cur then
        redis.call('HSET', ak, field, to)
        ev_rate_limit_adjusted(P, id, queue, jtype, now, key, strategy, cur, to, 'rate_limited')
      end
    end
  end
  redis.call('HSET', ak, 'down_at', now, 'ok', 0, 'round', (tonumber(a[3]) or 0) + 1)
  redis.call('PEXPIRE', ak, RL_IDLE_MS)
  -- A floor above the new concurrency is owed only up to it.
  if pol.floor then Pool.sync_all(P, key, Policy.effective(P, key, pol), now) end
end

-- Adapt.up(P, key, pol, now, id, queue, jtype): job id of key K, whose policy pol is adaptive,
-- succeeded: every pol.adapt.after such successes raise K's effective limits one step toward the
-- policy's (a field at the policy leaves the hash), and K's parked lanes re-open to use the room.
function Adapt.up(P, key, pol, now, id, queue, jtype)
  local ak = key_rl_adapt(P, key)
  local a = redis.call('HMGET', ak, 'concurrency', 'rate_limit')
  if not a[1] and not a[2] then return end
  -- Only a success at the limit says the limit could be higher: a key with room for one more job of
  -- this one's cost learns nothing about the upstream (the job itself still holds its slot here). The
  -- limit counts units: a key whose jobs cost 2 is at a limit of 4 with two jobs (issue 37 item 9).
  if a[1] and not a[2] then
    local conc = tonumber(a[1])
    local held = Conc.held_units(P, key, now, redis.call('GET', key_rl_active_units(P, key)))
    if held + Policy.units(pol.cost or 1, conc) <= conc then return end
  end
  if incr(ak, 'ok', 1) < pol.adapt.after then return end
  -- Two limits: the concurrency and the window.
  local steps = { { 'concurrency', 'concurrency', a[1], pol.conc, 1 },
    { 'rate_limit', 'rate', a[2], pol.rate_limit, pol.rate_limit and math.max(1, math.floor(pol.rate_limit / 10)) } }
  for _, st in ipairs(steps) do
    local field, strategy, cur, limit, step = st[1], st[2], tonumber(st[3]), st[4], st[5]
    if cur then
      if not limit or cur + step >= limit then
        redis.call('HDEL', ak, field)
        if limit then ev_rate_limit_adjusted(P, id, queue, jtype, now, key, strategy, cur, limit, 'recovered') end
      else
        redis.call('HSET', ak, field, cur + step)
        ev_rate_limit_adjusted(P, id, queue, jtype, now, key, strategy, cur, cur + step, 'recovered')
      end
    end
  end
  redis.call('HSET', ak, 'ok', 0)
  redis.call('PEXPIRE', ak, RL_IDLE_MS)
  Lane.wake_all(P, key, now)
  if pol.floor then Pool.sync_all(P, key, Policy.effective(P, key, pol), now) end
end

-- Adapt.of(P, key, spec): the key's policy when the job's spec and the key's policy are adaptive,
-- else nil (a job whose spec has no '~' costs nothing here).
function Adapt.of(P, key, spec)
  if not (key and spec and string.find(spec, '~', 1, true)) then return nil end
  local pol = Policy.of(P, key, spec)
  return pol and pol.adapt and pol
end
