-- Pools and floors: a rate-limit key's burstable concurrency (ours, beyond the seed; how the pieces fit:
-- includes/ratelimit.lua).
--
-- a concurrency C (its ceiling) draws its slots from a shared pool (Pool.pick): for a lane of a tenant's
-- sub-queue Q@T whose tenant has a concurrency in Q (the queue's tenancy setting, includes/tenant.lua),
-- the tenant's: S is that cap, its holders P..'q:'..Q..'@'..T..':rl:active', and the pool is named
-- Q@T in what follows; else the queue's: the queue-level concurrency S (PUT
-- /admin/queues/{q}/rate-limit), whose holders P..'q:'..Q..':rl:active' already count. A key below
-- its floor may take any free slot of the pool (the queue gate's or the tenant gate's own check). A key
-- at or above its floor borrows: it may start only while the pool's holders H plus the floors still
-- owed W leave a slot, H + W < S, and never past C. W is the queue conf's field 'want': the sum, over
-- the keys whose lane in the queue (or a tenant's sub-queue of it) is OPEN (or parked only by the key's
-- own concurrency, see Pool.owes), of F minus the key's holders, when positive, each lane's part in the
-- hash P..'q:'..Q..':want' (lane -> part; a lane owed nothing has no field; the conf field leaves at 0).
-- A lane's part lives in its pool's hash; a lane of a sub-queue whose pool moved (the tenant's cap was
-- set or lifted) has its old part taken out of the other pool at its next sync; queue-conf-1.lua
-- re-syncs the queue's waiting lanes (a bounded number) when its pools move. So a slot a borrower
-- gives back goes to a key below its floor first, and an idle key (no ready job, or a lane its window,
-- throttle or a dynamic block holds back) reserves nothing: the pool is work-conserving. Pool.sync keeps a key's part exact after each change of its holders or of its
-- lane's openness (FETCH's claim, park and discard; make_ready; unready; RateKey.release; Lane.release). A
-- borrower that may not start parks its lane with strategy 'pool' in P..'q:'..Q..':pool:wait' (FIFO by
-- time) and in P..'rl:wake' POOL_RECHECK_MS on; a slot the queue gives back (active.lua leave_active)
-- and a part that shrinks re-open the waiting lanes (Pool.wake), and FETCH's order (priority, then
-- FIFO) decides which borrows. A change of a key's floor or concurrency (a newer policy, an override,
-- an adaptive step) re-computes its parts. Holders and floors count jobs,
-- as the queue's concurrency does, whatever their cost. A lane without a pool (a queue without a
-- concurrency, a tenant without a cap there): a floor then means nothing and the key is limited by C
-- alone. A key whose jobs carry no floor never
-- reads or writes any of this.
-- CAPS: its loops visit the queues whose lane for a key holds jobs (at most the queues there are), and
-- the waiting lanes a pool re-opens at once (Pool.wake: at most POOL_WAKE_MAX = 10).
--@include rl_conc
--@include tenant
--@include counters

local POOL_RECHECK_MS = 1000
local POOL_WAKE_MAX = 10
local Pool = {}
-- Lanes (includes/rl_lanes.lua fills this table) and pools call each other: a part that shrinks
-- re-opens the lanes a pool holds back, and a lane's release syncs its part.
local Lane = {}

-- Pool.pick(q, conc, tq): the pool a lane in q (a queue, or a tenant's sub-queue of it) draws floors
-- from, given its queue's concurrency conc and tenancy setting tq (decoded): its name and size (see
-- "Burstable concurrency"); nil when it has none.
function Pool.pick(q, conc, tq)
  local queue, tenant = Tenant.base_queue(q)
  local cap = tenant and Tenant.cap(tq, tenant)
  if cap then return q, cap end
  if conc then return queue, conc end
  return nil
end

-- Pool.of(P, q): Pool.pick with q's queue's settings read (one HMGET).
function Pool.of(P, q)
  local c = redis.call('HMGET', key_queue_conf(P, (Tenant.base_queue(q))), 'rl_concurrency', 'tenancy')
  return Pool.pick(q, tonumber(c[1]), Tenant.decode_tenancy(c[2]))
end

-- Pool.owed(w, gen): the floors owed in a pool whose conf fields want and want_gen are w, in a queue whose
-- pool generation is gen: none when they were owed in an earlier pool (Pool.part resets them).
function Pool.owed(w, gen)
  if (w[2] or '') ~= gen then return 0 end
  return whole(w[1]) or 0
end

-- Pool.learn(P, e, q, l): limits e (Policy.effective) of a key with a floor learn the pool of its lane in q
-- (Pool.pick, from l: gates.lua Gate.settings of q's queue), and the floors owed there now (one HGET).
-- Nothing for a key without a floor or a lane without a pool. The floor never exceeds the key's ceiling.
function Pool.learn(P, e, q, l)
  if not (e.floor and e.conc) then return end
  local pool, size = Pool.pick(q, l.conc, l.tenancy)
  if not pool then return end
  e.floor = math.min(e.floor, e.conc)
  e.pool_size, e.pool_queue = size, pool
  e.pool_want = Pool.owed(redis.call('HMGET', key_queue_conf(P, pool), 'want', 'want_gen'), l.pool_gen)
end

-- Pool.check(P, key, e, now, jobs): K (limits e, learned by Pool.learn), holding `jobs` jobs, is past its
-- floor and the pool's holders plus the floors still owed there leave no slot: 'pool', the pool's size,
-- that use and when to look again; nil when it may start (below its floor it may take any free slot).
function Pool.check(P, key, e, now, jobs)
  if jobs < e.floor then return nil end
  local used = redis.call('ZCOUNT', key_queue_rl_active(P, e.pool_queue), '(' .. now, '+inf') + e.pool_want
  if used < e.pool_size then return nil end
  return 'pool', e.pool_size, used, now + POOL_RECHECK_MS
end

-- Pool.wake(P, pool, now): a slot of the pool came back, or fewer are owed (see "Burstable
-- concurrency"; pool: a queue's name, or a tenant's sub-queue's): re-open the lanes the pool holds
-- back, the oldest POOL_WAKE_MAX (the others' own timers look again), so that FETCH's order (priority, then FIFO) decides who borrows; a re-opened
-- lane that still may not borrow parks again when FETCH meets it.
function Pool.wake(P, pool, now)
  local popped = redis.call('ZPOPMIN', key_queue_pool_wait(P, pool), POOL_WAKE_MAX)
  for i = 1, #popped, 2 do
    local lane = popped[i]
    local q, key = string.match(lane, '^(.-)\n(.*)$')
    if q then
      redis.call('ZREM', key_rl_wake(P), lane)
      Lane.release(P, q, key, now)
    end
  end
end

-- Pool.owes(P, q, key): K's lane in q claims its floor: it is open, or parked only by the key's own
-- concurrency (a job that costs more than the units left), which gives it back with its next release.
-- A lane parked by its window, throttle, a dynamic block or the pool itself owes nothing meanwhile.
function Pool.owes(P, q, key)
  if redis.call('HEXISTS', key_queue_heads(P, q), key) == 1 then return true end
  local parked = redis.call('HGET', key_queue_parked(P, q), key)
  return parked ~= false and string.match(parked, '^%S+ concurrency') ~= nil
end

-- Pool.skip(held, floor, delta): a sync can be left out. `delta` is how the caller moved the key's
-- holders (+1 a claim, -1 a release, 0 none; nil when its floor may have moved: never left out). Every
-- part was last computed with the same floor (a floor moves only through a sync of every lane, nil
-- delta), and with the holders before the move: when those and the holders now are both at least the
-- floor, the part was 0 and stays 0, whatever the lane. So a key above its floor, the common case under
-- load, pays one ZCOUNT. (One floor moves without a sync: an override's expiry, for a key whose
-- adaptation holds its concurrency below its floor; its parts then stay high, which only makes the
-- borrowers wait more, until its next sync.)
function Pool.skip(held, floor, delta)
  return delta ~= nil and held - math.max(delta, 0) >= floor
end

-- Pool.part(P, pool, lane, part, now): the lane's part of the floors owed in the pool becomes `part`
-- (the field lane of P..'q:'..pool..':want', summed in the pool's conf field 'want', which leaves at
-- 0); a part that shrinks re-opens lanes the pool holds back.
function Pool.part(P, pool, lane, part, now)
  local wk = key_queue_want(P, pool)
  local ck = key_queue_conf(P, pool)
  -- Parts owed in an earlier pool (the queue's pool_gen moved since: the pool came or went) leave first.
  local gen = redis.call('HGET', key_queue_conf(P, (Tenant.base_queue(pool))), 'pool_gen') or ''
  -- (want_gen is kept only while something is owed, so a pool's conf leaves with its last part.)
  if (redis.call('HGET', ck, 'want_gen') or '') ~= gen then
    redis.call('DEL', wk)
    redis.call('HDEL', ck, 'want', 'want_gen')
  end
  local old = whole(redis.call('HGET', wk, lane)) or 0
  if part == old then return end
  if part == 0 then redis.call('HDEL', wk, lane) else redis.call('HSET', wk, lane, part) end
  if incr(ck, 'want', part - old) == 0 then
    redis.call('HDEL', ck, 'want', 'want_gen')
  elseif gen ~= '' then
    redis.call('HSET', ck, 'want_gen', gen)
  end
  if part < old then Pool.wake(P, pool, now) end
end

-- Pool.sync(P, q, key, floor, now, held, delta, pool): key K, whose floor in the pool of its lane in q
-- (the queue or a tenant's sub-queue of it; Pool.pick names it `pool`, nil for none) is `floor`,
-- changed its holders (now `held`, nil: count them), or its lane in q opened or closed: its part of the
-- floors owed in the pool (Pool.part, field q..'\n'..K) becomes exact. A lane of a sub-queue has its
-- part taken out of the other pool it may draw from (the queue's, or the tenant's), where a change of
-- the tenant's cap may have left it. delta: see Pool.skip.
function Pool.sync(P, q, key, floor, now, held, delta, pool)
  held = held or Conc.active(P, key, now)
  if Pool.skip(held, floor, delta) then return end
  local queue = Tenant.base_queue(q)
  local part = 0
  if pool and floor > held and Pool.owes(P, q, key) then part = floor - held end
  local lane = q .. '\n' .. key
  local home = pool or queue
  Pool.part(P, home, lane, part, now)
  if q ~= queue then Pool.part(P, home == q and queue or q, lane, 0, now) end
end

-- Pool.floor_of(P, q, e): the floor a key of limits e (Policy.effective) owes in the pool of its lane in q
-- (Pool.of: one HMGET), at most its effective concurrency, and the pool's name; nil when it has no floor
-- or the lane no pool.
function Pool.floor_of(P, q, e)
  if not (e.floor and e.conc) then return nil end
  local pool = Pool.of(P, q)
  if not pool then return nil end
  return math.min(e.floor, e.conc), pool
end

-- Pool.floor(P, q, key, spec): Pool.floor_of for a job of policy `spec`; nil, with no command, when
-- the spec has no floor.
function Pool.floor(P, q, key, spec)
  if not (spec and string.find(spec, ' f', 1, true)) then return nil end
  return Pool.floor_of(P, q, Policy.effective(P, key, Policy.of(P, key, spec)))
end

-- Pool.sync_all(P, key, e, now, also, delta): Pool.sync for every lane of K, whose holders or limits
-- changed (e: its limits now, Policy.effective), and for its lane in `also` (nil, or a queue whose lane may
-- just have emptied, and so left P..'rl:'..K..':queues'); a lane whose queue has no pool, or a key no
-- longer with a floor, owes nothing. delta: see Pool.skip (checked once, against the floor at most).
function Pool.sync_all(P, key, e, now, also, delta)
  local held = Conc.active(P, key, now)
  if Pool.skip(held, e.floor and e.conc and math.min(e.floor, e.conc) or 0, delta) then return end
  local queues = redis.call('SMEMBERS', key_rl_queues(P, key))
  if also then queues[#queues + 1] = also end
  local seen = {}
  for _, q in ipairs(queues) do
    if not seen[q] then
      seen[q] = true
      local floor, pool = Pool.floor_of(P, q, e)
      Pool.sync(P, q, key, floor or 0, now, held, delta, pool)
    end
  end
end
