-- A key's sliding window (seed §5, window limits): P..'rl:'..K..':win', a zset of starts scored by
-- their time, each 'id:claim' (one unit) or 'id:claim:u', and P..'rl:'..K..':win:units' the sum of
-- u - 1 over its entries (absent while every entry is one unit; see "Costs" in includes/rl_policy.lua).
-- CAPS: the expired entries looked at per check (RL_PRUNE_MAX: more are pruned by the next checks,
-- and until then they count, so the limit is never exceeded).
--@include rl_policy

local Window = {}

-- Window.units(P, key, period, now, extra, prune): the units of K's window (see "Costs"), given
-- `extra`, the value of P..'rl:'..K..':win:units' (nil: every entry is one unit). With `prune`, expired
-- entries leave the window (and their units the count); without, they are only left out (inspection).
function Window.units(P, key, period, now, extra, prune)
  local wk = key_rl_win(P, key)
  local cut = now - period
  if not extra then
    if not prune then return redis.call('ZCOUNT', wk, '(' .. cut, '+inf') end
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', cut)
    return redis.call('ZCARD', wk)
  end
  extra = tonumber(extra)
  local gone = redis.call('ZRANGE', wk, '-inf', cut, 'BYSCORE', 'LIMIT', 0, RL_PRUNE_MAX)
  local back = 0
  for _, m in ipairs(gone) do
    local u = string.match(m, '^[^:]+:%d+:(%d+)$')
    if u then back = back + tonumber(u) - 1 end
  end
  if prune and #gone > 0 then
    redis.call('ZREMRANGEBYRANK', wk, 0, #gone - 1)
    if back ~= 0 then redis.call('INCRBY', key_rl_win_units(P, key), -back) end
    return redis.call('ZCARD', wk) + extra - back
  end
  return redis.call('ZCARD', wk) - #gone + extra - back
end

-- Window.check(P, key, e, now, extra): K's window (limits e, Policy.effective) has no room for one more
-- job of e.cost: 'rate', the limit, its units now and when the oldest entry slides out; nil while it
-- has room. Expired entries are pruned on the way. extra: P..'rl:'..K..':win:units' (as read).
function Window.check(P, key, e, now, extra)
  local n = Window.units(P, key, e.rate_period, now, extra, true)
  if n + Policy.units(e.cost, e.rate_limit) <= e.rate_limit then return nil end
  local oldest = redis.call('ZRANGE', key_rl_win(P, key), 0, 0, 'WITHSCORES')
  return 'rate', e.rate_limit, n, oldest[2] and tonumber(oldest[2]) + e.rate_period or now
end

-- Window.take(P, key, e, id, claim, now): job id's start (claim `claim`) enters K's window; returns the
-- units it counts. The entry is unique per start: a give-back of the attempt can never make a later
-- start overwrite this one.
function Window.take(P, key, e, id, claim, now)
  local wu = Policy.units(e.cost, e.rate_limit)
  redis.call('ZADD', key_rl_win(P, key), now, id .. ':' .. claim .. (wu ~= 1 and ':' .. wu or ''))
  redis.call('PEXPIRE', key_rl_win(P, key), e.rate_period)
  if wu ~= 1 then
    redis.call('INCRBY', key_rl_win_units(P, key), wu - 1)
    redis.call('PEXPIRE', key_rl_win_units(P, key), e.rate_period)
  end
  return wu
end

-- Window.used(P, key, id, claim, units, used): the entry of job id's claim `claim`, which counted
-- `units`, counts `used` from now on, if still in the window; true when that freed units.
function Window.used(P, key, id, claim, units, used)
  local wk = key_rl_win(P, key)
  local old = id .. ':' .. claim .. (units ~= 1 and ':' .. units or '')
  local at = redis.call('ZSCORE', wk, old)
  if not at then return false end
  -- The new entry goes in before the old one leaves, so the window never empties: an emptied zset is
  -- deleted, and the ZADD after it would make a new one without the window's expiry.
  redis.call('ZADD', wk, at, id .. ':' .. claim .. (used ~= 1 and ':' .. used or ''))
  redis.call('ZREM', wk, old)
  local xk = key_rl_win_units(P, key)
  redis.call('INCRBY', xk, used - units)
  -- The counter lives as long as the window's newest entry can.
  redis.call('PEXPIRE', xk, math.max(redis.call('PTTL', wk), 1))
  return used < units
end
