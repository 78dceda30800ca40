-- A key's throttle (seed §6): starts spaced period/limit apart (GCRA with no burst), never closer than
-- 90% of that. CAPS: no loop.
--@include rl_policy

local Throttle = {}

-- Throttle state P..'rl:'..K..':tat' = "<next allowed ms> <interval ms> <last start ms>" (GCRA with no
-- burst). The interval that computed it is kept so that when the key's throttle changes (a policy
-- change, an override set, lifted or expired) the next start is re-derived from the new interval:
-- the previous allowed time + the new interval, never closer than 90% of it to the last start. A
-- bare number (older data) is taken as the next allowed time.
local THROTTLE_KEEP_MS = 86400000
function Throttle.allowed(P, key, interval)
  local v = redis.call('GET', key_rl_tat(P, key))
  if not v then return 0 end
  local nxt, iv, last = string.match(v, '^(%S+) (%S+) (%S+)$')
  if not nxt then return tonumber(v) or 0 end
  nxt, iv, last = tonumber(nxt), tonumber(iv), tonumber(last)
  if iv == interval then return nxt end
  return math.max(nxt - iv + interval, last + math.floor(interval * 0.9))
end

function Throttle.interval(e)
  return math.floor(e.throttle_period / e.throttle_limit)
end

-- Throttle.check(P, key, e, now): K's next start (limits e) is not due yet: 'throttle', the limit, 1 and
-- when it is; nil when it is due.
function Throttle.check(P, key, e, now)
  local allowed = Throttle.allowed(P, key, Throttle.interval(e))
  if allowed > now then return 'throttle', e.throttle_limit, 1, allowed end
  return nil
end

-- Throttle.take(P, key, e, now): a start of K: the next one moves on. Next start at the previous allowed
-- time + interval, so a start that came a little late (waiting for a FETCH) does not push every later
-- one back; but never closer than 90% of the interval. A start of u units counts as u starts.
function Throttle.take(P, key, e, now)
  local interval = Throttle.interval(e)
  local span = interval * Policy.units(e.cost, e.throttle_limit)
  local nxt = math.max(Throttle.allowed(P, key, interval) + span, now + math.floor(span * 0.9))
  redis.call('SET', key_rl_tat(P, key), nxt .. ' ' .. interval .. ' ' .. now, 'PX', span + THROTTLE_KEEP_MS)
end
