-- A key's concurrency (seed §4): P..'rl:'..K..':active', job ids holding a slot scored by lease deadline
-- (a slot whose lease lapsed no longer counts, so a killed worker cannot leak one), and for jobs that
-- cost more than 1 ("Costs" in includes/rl_policy.lua) P..'rl:'..K..':active:cost' (id -> u) and
-- P..'rl:'..K..':active:units' (the sum of u - 1).
-- CAPS: the lapsed holders looked at per check (RL_PRUNE_MAX).
--@include rl_policy

local Conc = {}

-- Conc.held_units(P, key, now, extra): the units K's unexpired slot holders hold, given `extra`, the value
-- of P..'rl:'..K..':active:units' (nil: every holder holds one). Holders whose lease lapsed hold nothing:
-- at most RL_PRUNE_MAX of them are looked at (past that, the rest still count until taken back).
function Conc.held_units(P, key, now, extra)
  local ak = key_rl_active(P, key)
  local held = redis.call('ZCOUNT', ak, '(' .. now, '+inf')
  if not extra then return held end
  held = held + tonumber(extra)
  local lapsed = redis.call('ZRANGE', ak, '-inf', now, 'BYSCORE', 'LIMIT', 0, RL_PRUNE_MAX)
  if #lapsed > 0 then
    for _, u in ipairs(redis.call('HMGET', key_rl_active_cost(P, key), unpack(lapsed))) do
      if u then held = held - (tonumber(u) - 1) end
    end
  end
  return held
end

-- Conc.active(P, key, now): jobs holding an unexpired concurrency slot of K.
function Conc.active(P, key, now)
  return redis.call('ZCOUNT', key_rl_active(P, key), '(' .. now, '+inf')
end

-- Conc.check(P, key, e, held): K's holders, holding `held` units (Conc.held_units), leave no room for one
-- more job of e.cost: 'concurrency', the limit, the units held and the earliest lease deadline (-1:
-- none, a concurrency of 0); nil while there is room.
function Conc.check(P, key, e, now, held)
  if held + Policy.units(e.cost, e.conc) <= e.conc then return nil end
  local first = redis.call('ZRANGE', key_rl_active(P, key), '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  return 'concurrency', e.conc, held, first[2] and tonumber(first[2]) or -1
end

-- Conc.take(P, key, e, id, lease): job id holds a slot of K until `lease`; returns the units it holds.
function Conc.take(P, key, e, id, lease)
  redis.call('ZADD', key_rl_active(P, key), lease, id)
  local cu = Policy.units(e.cost, e.conc)
  if cu ~= 1 then
    redis.call('HSET', key_rl_active_cost(P, key), id, cu)
    redis.call('INCRBY', key_rl_active_units(P, key), cu - 1)
  end
  return cu
end

-- Conc.give_back(P, key, id, units): job id, which held `units`, no longer holds a slot of K; false when
-- it held none (already given back, or never taken).
function Conc.give_back(P, key, id, units)
  if redis.call('ZREM', key_rl_active(P, key), id) == 0 then return false end
  if units ~= 1 and redis.call('HDEL', key_rl_active_cost(P, key), id) == 1 then
    if redis.call('DECRBY', key_rl_active_units(P, key), units - 1) == 0 then
      redis.call('DEL', key_rl_active_units(P, key))
    end
  end
  return true
end
