-- A rate-limit key's policy (seed: ojs-rate-limiting-spec.md; how the pieces fit: includes/ratelimit.lua):
-- the table Policy parses a job's policy, merges it with the key's registry and an operator's override,
-- and says how many units a job of a given cost holds of a limit.
--
-- A job's policy is its 'rl' field: "<concurrency> <rate_limit> <rate_period_ms> <throttle_limit>
-- <throttle_period_ms> <on_limit>[ <cost>][ ~<increase_after>[:<type>,<type>…]][ f<floor>]", '-' for an
-- absent limit; the cost only when not 1; the '~' token only for an adaptive policy (see "Adaptive");
-- the 'f' token only for a key with a floor (see "Burstable concurrency").
--
-- Costs (ours, beyond the seed). A job's cost (default 1) is the units it counts against each of the
-- key's limits: it holds u = max(1, min(cost, limit)) of each, so a job that costs more than a whole
-- limit runs alone rather than never (and a concurrency of 0 still pauses). Concurrency: the slot
-- holders' units are their count plus P..'rl:'..K..':active:units' (the sum of u - 1 over holders whose u
-- is not 1; each such holder's u in the hash P..'rl:'..K..':active:cost'), less what holders whose lease
-- lapsed hold (they no longer count, as above). Window: an entry is 'id:claim' for one unit, or
-- 'id:claim:u'; the window's units are its entries plus P..'rl:'..K..':win:units' (the sum of u - 1 over
-- them), and pruning an expired entry 'id:claim:u' takes its u - 1 back. Throttle: a start of u units
-- moves the next allowed start u intervals on. A key whose jobs all cost 1 never has either units key:
-- RateKey.check reads both in the MGET that reads the dynamic block, so such a key costs no extra command.
-- A lane still serves its jobs in order: when its head needs more units than are left, the lane parks
-- with the cheaper jobs behind it, so a costly job is never starved by cheap ones of its key, and a
-- cheaper one never overtakes a better-placed one.
-- The claim keeps in the job's 'rl_units' ("<concurrency u> <window u>", only when either is not 1)
-- what it took, so the release gives back exactly that, and an ACK that reports the units the job
-- really used (RateKey.used) corrects its window entry by the difference, at once.
--
-- Mixed policies on one key. A key's limits are ONE policy, its registry P..'rl:'..K..':policy': the
-- policy of the newest job enqueued with K (RateKey.register), with an operator override on top, field by
-- field (Policy.effective). Every job of K is limited by it, whichever job heads a lane, and
-- GET /rate-limits/K shows exactly it. on_limit stays the job's own: it says what happens to that job.
-- An enqueue that changes the limits re-opens K's parked lanes, so a key paused by one job's
-- `concurrency: 0` runs again as soon as a later job of K says otherwise (or an override does).
--
-- Every parked lane has a way out: a wake time in P..'rl:wake' (window, throttle, dynamic block,
-- CAPS: a spec's optional tokens (at most 3: the cost, the adaptive policy, the floor).

-- How long an idle key's state is kept (see includes/ratelimit.lua, "Idle keys"), and the expired
-- window entries or lapsed holders of one key looked at per check.
local RL_IDLE_MS = 86400000
local RL_PRUNE_MAX = 100
local Policy = {}

function Policy.parse(spec)
  if not spec then return nil end
  local c, rl, rp, tl, tp, on, rest = string.match(spec, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)(.*)$')
  local p = { conc = tonumber(c), rate_limit = tonumber(rl), rate_period = tonumber(rp),
    throttle_limit = tonumber(tl), throttle_period = tonumber(tp), on_limit = on, cost = 1 }
  if rest and rest ~= '' then
    -- At most three tokens: the cost, the adaptive policy and the floor.
    for tok in string.gmatch(rest, '%S+') do
      local n, types = string.match(tok, '^~(%d+):?(.*)$')
      local floor = string.match(tok, '^f(%d+)$')
      if n then
        p.adapt = { after = tonumber(n), types = ',' .. types .. ',' }
      elseif floor then
        p.floor = tonumber(floor)
      else
        p.cost = tonumber(tok) or 1
      end
    end
  end
  return p
end

-- Policy.units(cost, limit): the units a job of `cost` holds of a limit (see "Costs" above).
function Policy.units(cost, limit)
  if cost == 1 then return 1 end
  return math.max(1, math.min(cost, limit))
end

-- Policy.units_held(text): the job's 'rl_units' field as numbers: concurrency units, window units.
function Policy.units_held(v)
  if not v then return 1, 1 end
  local c, w = string.match(v, '^(%d+) (%d+)$')
  return tonumber(c) or 1, tonumber(w) or 1
end

-- Policy.of(P, key, job_spec): the key's registry policy with the job's own on_limit (the job's whole
-- policy when the key has no registry yet, as for jobs enqueued before registries existed).
function Policy.of(P, key, job_spec)
  local job = Policy.parse(job_spec)
  local reg = Policy.parse(redis.call('GET', key_rl_policy(P, key)))
  if not reg then return job end
  -- on_limit and cost are the job's own; the registry's (the newest job's) say nothing of this one.
  reg.cost = 1
  if job then reg.on_limit, reg.cost = job.on_limit, job.cost end
  return reg
end

-- The limits in force for key K: the operator's override, field by field, over the key's policy.
function Policy.effective(P, key, pol)
  local o = redis.call('HMGET', key_rl_ovr(P, key), 'concurrency', 'rate_limit', 'rate_period',
    'throttle_limit', 'throttle_period')
  local e = { conc = pol.conc, rate_limit = pol.rate_limit, rate_period = pol.rate_period,
    throttle_limit = pol.throttle_limit, throttle_period = pol.throttle_period, on_limit = pol.on_limit,
    cost = pol.cost or 1, floor = pol.floor }
  if pol.adapt then
    local a = redis.call('HMGET', key_rl_adapt(P, key), 'concurrency', 'rate_limit', 'round')
    if a[1] and e.conc then e.conc = math.min(e.conc, tonumber(a[1])) end
    if a[2] and e.rate_limit then e.rate_limit = math.min(e.rate_limit, tonumber(a[2])) end
    e.round = a[3] or '0'
  end
  if o[1] then e.conc = tonumber(o[1]) end
  if o[2] then e.rate_limit, e.rate_period = tonumber(o[2]), tonumber(o[3]) end
  if o[4] then e.throttle_limit, e.throttle_period = tonumber(o[4]), tonumber(o[5]) end
  e.ovr = o
  return e
end

-- Policy.overridden(e, strategy): whether the limit RateKey.check named (`strategy`) is the override's, not the
-- key's policy (read by job-explain-1.lua; e from Policy.effective).
function Policy.overridden(e, strategy)
  local i = ({ concurrency = 1, rate = 2, throttle = 4 })[strategy]
  return i ~= nil and e.ovr ~= nil and e.ovr[i] ~= false
end

-- Policy.limits_part(spec): what of a job's policy is the key's: the five limit fields, the adaptive
-- policy and the floor (on_limit and the cost are the job's own).
function Policy.limits_part(spec)
  if not spec then return nil end
  return (string.match(spec, '^(%S+ %S+ %S+ %S+ %S+)') or spec) .. (string.match(spec, ' (~%S+)') or '')
    .. (string.match(spec, ' (f%d+)') or '')
end
