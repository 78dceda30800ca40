-- Rate limits (seed: ojs-rate-limiting-spec.md), enforced inside FETCH without scanning limited work.
-- The pieces, one include each:
--   rl_policy.lua    a key's policy: the job's spec, the key's registry, an operator's override, costs
--   rl_conc.lua      concurrency: slot holders by lease deadline
--   rl_window.lua    the sliding window
--   rl_throttle.lua  the throttle (GCRA)
--   rl_pool.lua      floors drawn from a queue's or a tenant's pool (burstable concurrency)
--   rl_lanes.lua     lanes: where a key's available jobs wait, parked while the key is limited
--   rl_adaptive.lua  limits that halve on a downstream rate limit and climb back on successes
-- and this file, RateKey: what FETCH, ACK, NACK and the enqueue call for a key (check, take, release,
-- used, register).
--
-- Per key K: P..'rl:'..K..':active' zset of job ids holding a concurrency slot, scored by lease
-- deadline (a slot whose lease lapsed no longer counts, so a killed worker cannot leak one);
-- P..'rl:'..K..':win' zset of start times in the sliding window; P..'rl:'..K..':tat' the throttle's
-- theoretical arrival time (GCRA with no burst: starts period/limit apart, never closer than 90% of it);
-- P..'rl:'..K..':until' a dynamic block (NACK with rate_limit_until); P..'rl:'..K..':ovr' an operator
-- override; P..'rl:'..K..':state' the blocking episode (for one rate_limit.exceeded per episode);
-- P..'rl:'..K..':queues' the queues whose lane for K holds jobs; P..'rl:keys' every key in use (lexicographic;
-- idle keys leave it, see "Idle keys" below).
--
-- of the key's policy. A lane parked with none of these (wake -1) is one whose effective concurrency
-- is 0 with no holder: it waits for the override or the policy that lifts the pause.
--
-- Idle keys. A key whose lanes are all empty and which has no slot holder is idle: its policy, episode
--
-- A key whose jobs carry none of costs, a floor or an adaptive policy reads and writes none of their
-- keys: RateKey.check is one MGET (dynamic block and both units counters) and one command per limit
-- it has.
-- Costs per FETCH (fetch-1.lua): a rate-limited key costs one pop per lane per blocking episode, however
-- many jobs it holds; a key's check reads its dynamic block and both units counters in one MGET; a key
-- whose jobs carry costs adds a ZRANGE of lapsed holders (an HMGET when there are some) and a ZRANGE of
-- expired window entries per check, and a claim of u > 1 units adds an HSET and INCRBY (concurrency) and
-- an INCRBY and PEXPIRE (window); an ACK with ack_used adds a ZSCORE, and when it changes the count a
-- ZADD, ZREM, INCRBY, PTTL and PEXPIRE; a key whose policy is adaptive adds an HMGET of its adaptation per
-- check, and its ACK a GET of the policy, an HMGET, a ZCOUNT and an HINCRBY (more when it steps up:
-- Adapt.up); a key with a floor in a queue with a pool (rl_pool.lua) adds per check an HGET of the floors
-- owed and, past its floor, a ZCOUNT of the queue's holders, and per pop Pool.sync: a ZCOUNT of the key's
-- holders, and unless the key holds its floor before and after (Pool.skip) an HEXISTS (an HGET when
-- parked), an HGET and, when its part changes, an HSET or HDEL, an HINCRBY and a ZPOPMIN of the pool's
-- waiting lanes (a claim does so for every lane of the key, after an SMEMBERS and an HGET of each lane's
-- queue conf); a park by the pool adds a ZADD and a PEXPIRE of the pool's waiting lanes; an ACK of a job
-- in a queue with a queue-level concurrency adds a ZPOPMIN of those (and re-opens at most POOL_WAKE_MAX =
-- 10 lanes).
-- CAPS: no loop of its own (see the pieces').
--@include rl_window
--@include rl_throttle
--@include rl_adaptive

local RateKey = {}

-- RateKey.check(P, key, e, now): may one more job of key K start now under limits e (Policy.effective; its
-- cost e.cost)? nil when it may; else strategy, limit, current, wake_at (ms, or -1 for "when released"),
-- the first limit reached in this order: a dynamic block, concurrency, the pool (a key with a floor),
-- the window, the throttle. current is in units. An override that expires before wake_at brings
-- wake_at forward: its expiry changes the limits. A job that needs more units than are left waits for
-- the oldest window entry (or the earliest lease) to go, and is checked again then.
function RateKey.check(P, key, e, now)
  -- One command for the dynamic block and both units counters (absent for a key whose jobs cost 1).
  local m = redis.call('MGET', key_rl_until(P, key), key_rl_win_units(P, key), key_rl_active_units(P, key))
  local strategy, limit, current, wake
  local until_ms = tonumber(m[1] or '0')
  if until_ms > now then
    strategy, limit, current, wake = 'dynamic', 0, 0, until_ms
  elseif e.conc then
    local held = Conc.held_units(P, key, now, m[3])
    strategy, limit, current, wake = Conc.check(P, key, e, now, held)
    if not strategy and e.pool_size then
      -- Past its floor a key only borrows; the floor counts jobs, not units.
      strategy, limit, current, wake = Pool.check(P, key, e, now, m[3] and Conc.active(P, key, now) or held)
    end
  end
  if not strategy and e.rate_limit and e.rate_period then
    strategy, limit, current, wake = Window.check(P, key, e, now, m[2])
  end
  if not strategy and e.throttle_limit and e.throttle_period then
    strategy, limit, current, wake = Throttle.check(P, key, e, now)
  end
  if not strategy then return nil end
  -- PTTL 0: the override expires this very millisecond (Redis expires a key only after its time), so
  -- the lane must wake now, not when the override's own limits would have let it.
  local ovr_ttl = redis.call('PTTL', key_rl_ovr(P, key))
  if ovr_ttl >= 0 and (wake < 0 or now + ovr_ttl < wake) then wake = now + ovr_ttl end
  return strategy, limit, current, wake
end

-- RateKey.take(P, key, e, id, claim, lease, now): job id starts under key K with limits e, as claim
-- number `claim` (its lease id); its slot lasts until `lease`. Returns the job's 'rl_units' value
-- ("<concurrency u> <window u>"), or nil when it took one unit of each (the claim keeps it in the
-- record, see "Costs" in rl_policy.lua).
function RateKey.take(P, key, e, id, claim, lease, now)
  local cu, wu = 1, 1
  if e.conc then cu = Conc.take(P, key, e, id, lease) end
  if e.rate_limit and e.rate_period then wu = Window.take(P, key, e, id, claim, now) end
  if e.throttle_limit and e.throttle_period then Throttle.take(P, key, e, now) end
  if cu == 1 and wu == 1 then return nil end
  return cu .. ' ' .. wu
end

-- RateKey.release(P, key, id, now, units, spec): job id (policy `spec`) gives back its concurrency slot
-- of key K, which held `units` (the first of its 'rl_units', 1 when it has none).
function RateKey.release(P, key, id, now, units, spec)
  if not Conc.give_back(P, key, id, units) then return end
  -- A key with a floor owes one more where its lanes are open (rl_pool.lua).
  if spec and string.find(spec, ' f', 1, true) then
    Pool.sync_all(P, key, Policy.effective(P, key, Policy.of(P, key, spec)), now, nil, -1)
  end
  -- A slot came back: the lanes that parked first may take it (a few; the others at the next
  -- releases, in their order). A key with a lane that holds jobs is not idle: only a key with none asks.
  Lane.wake(P, key, now, nil)
  if redis.call('EXISTS', key_rl_queues(P, key)) == 0 then Lane.maybe_idle(P, key) end
end

-- RateKey.used(P, key, id, claim, units, used, now): the ACK of job id's claim `claim`, whose window entry
-- counted `units`, reports it really used `used` units: the entry, if still in the window, counts
-- `used` from now on, and when that frees units K's parked lanes re-open at once.
function RateKey.used(P, key, id, claim, units, used, now)
  if used == units then return end
  if Window.used(P, key, id, claim, units, used) then Lane.wake_all(P, key, now) end
end

-- RateKey.register(P, key, spec, now): a job with policy `spec` was enqueued with key K: K is listed in
-- P..'rl:keys' (and no longer idle), and its policy becomes the key's (newest wins). When the limits
-- change, K's parked lanes re-open so that FETCH judges them by the new limits (a stricter policy
-- re-parks them at the next FETCH).
function RateKey.register(P, key, spec, now)
  redis.call('ZADD', key_rl_keys(P), 0, key)
  if redis.call('ZREM', key_rl_idle(P), key) == 1 then
    -- K was idle: its counters and episode stay again (SET below takes the policy's expiry away).
    redis.call('PERSIST', key_rl_stats(P, key))
    redis.call('PERSIST', key_rl_state(P, key))
  end
  local old = redis.call('SET', key_rl_policy(P, key), spec, 'GET')
  if old and Policy.limits_part(old) ~= Policy.limits_part(spec) then
    Lane.wake_all(P, key, now)
    -- A floor that came, went or moved changes what the key owes its pools.
    if string.find(old .. spec, ' f', 1, true) then
      Pool.sync_all(P, key, Policy.effective(P, key, Policy.of(P, key, spec)), now)
    end
  end
end
