-- Tenants (the OJS multi-tenancy extension; README "Tenants and fair share").
--
-- A job's tenant is its record's 'tenant' field: its meta.tenant_id, which the server takes from the
-- X-OJS-Tenant header when the body has none and checks against ^[A-Za-z0-9][A-Za-z0-9._:-]*$. The
-- waiting jobs of tenant T in queue Q live in T's sub-queue of Q, the name Q..'@'..T with every ':' of T
-- spelled '%3A' ('@' is not allowed in a queue name and neither '@' nor '%' in a tenant, so the name
-- is unambiguous, and with no ':' in it no key of a sub-queue is another family's key). A sub-queue has
-- its own ready set, rate-limit lanes, heads and parked hashes, exactly as a queue has (its key names
-- are the queue families' with the sub-queue's name), so every lane mechanism of ratelimit.lua serves
-- tenants unchanged, and a tenant that spreads its work over many rate-limit keys still has one ready
-- set and one place in the fair share. Everything else of the job (its queue field, counts, stats,
-- events, settings, queue-level limits) is its queue's. Jobs without a tenant stay in Q's own sets.
--
-- Fair share (stride scheduling): P..'q:'..Q..':tenants' is a sorted set of Q's tenants that may have
-- ready jobs, each scored by its pass; '' stands for Q's jobs without a tenant once Q has tenants.
-- FETCH serves Q by taking the tenant with the lowest pass (ties by name), claiming that tenant's best
-- job (priority and FIFO first inside a tenant), and adding 1 / weight to its pass; so over any run of
-- claims while tenants stay backlogged, each gets weight / sum(weights) of them, within one claim. A
-- tenant joins at the lowest pass present (0 when none): an idle tenant neither banks credit nor falls
-- behind, and the set is work-conserving (an empty tenant is simply not in it). A tenant leaves when
-- FETCH finds its ready set empty (one pop per exit, counted against FETCH's MAX_SKIPS). Weights:
-- P..'tenant_weights' hash tenant -> weight (PUT /admin/tenants/{id}); 1 when unset; a queue's tenancy
-- setting may give its own (below).
-- P..'q:'..Q..':subs' is the set of tenants whose sub-queue of Q may hold waiting jobs (ready, or in a
-- lane open or parked): a tenant enters with its job (make_ready) and leaves when FETCH finds its
-- sub-queue with nothing ready and no lane open or parked (a tenant whose last job was cancelled stays
-- until then), or, for a tenant out of the share, when its last waiting job is cancelled or it is
-- unparked from its cap (below) with nothing waiting (Tenant.sub_check); re-scoring an aging change visits their sub-queues (includes/rescore.lua).
-- Q's conf field 'tenants' = '1' once Q held a tenant's job: FETCH reads it with Q's other settings, so
-- a queue that never had a tenant pays nothing for any of this.
-- Per tenant, P..'tenant:'..T..':stats' counts its jobs 'enqueued' and 'dispatched' (claims), for
-- GET /admin/tenants/{id}/stats; it expires TENANT_STATS_MS after it last moved, and P..'tenants' (zset,
-- score = last enqueue or claim, ms) lists the tenants whose counters live: a tenant idle longer leaves
-- it when any tenant's counter next moves.
-- A queue's tenancy setting (ours; conf field 'tenancy', JSON written by PUT /admin/queues/{q}/tenancy,
-- ojs_core::tenancy): where its jobs' tenant comes from (the server resolves that at the enqueue) and
-- the queue's own weights: 'weights' (tenant -> weight) over the tenant's global weight, and
-- 'default_weight' over '_default' for the queue's jobs without a tenant. FETCH reads the field with the
-- queue's other settings (includes/gates.lua Gate.settings), so a queue without it pays nothing.
-- Each claim of a tenant's job is also counted in P..'tenants:m:'..minute (minute = now // 60000), a
-- hash tenant -> claims in that minute, and field '' -> every tenant's claims in it: the share of the
-- last hour (GET /admin/tenants, the dashboard, ojs_tenant_share_last_hour) reads the last 60 of them.
-- Each expires TENANT_MINUTES_KEEP minutes after its minute began (set once per script call: a call has
-- one `now`; counters.lua first_in_call); the key is named after the time, not the tenant, and holds
-- the tenants claimed in it.
-- A tenant's concurrency in a queue (ours): the queue's tenancy setting may cap how many of a tenant's
-- jobs of the queue are active at once ('concurrency': tenant -> cap, 'default_concurrency' for the
-- tenants it does not name; the queue's jobs without a tenant are never capped). Its holders are the
-- zset P..'q:'..Q..'@'..T..':rl:active' (the queue-level family under the sub-queue's name: job id ->
-- lease deadline, moved by heartbeats as the job's lease is; a holder whose lease lapsed stops
-- counting), and a claimed job keeps its sub-queue in its record's 'tslot', so its end (active.lua
-- leave_active) gives the slot back. Every claimed job of a tenant holds one, capped or not, so a cap
-- set while the tenant runs jobs counts them from that moment. FETCH checks the cap when the tenant's turn comes
-- (gates.lua Gate.tenant): a tenant at its cap leaves the fair share for P..'q:'..Q..':tenants:full'
-- (Tenant.park), so the next claims pass it by in O(log t) and it stops costing anything; a parked
-- tenant does not join the share with a new ready job (Tenant.join), and re-joins at the lowest pass
-- (Tenant.unpark) when one of its slots comes back, or when the queue's settings change
-- (queue-conf-1.lua). A parked tenant always holds a slot (it parked at a cap of at least 1, and every
-- end of a holder unparks it), so none stays parked with nothing to wake it.
-- Costs per FETCH (fetch-1.lua): a queue with tenants adds one ZCARD per call and queue, and per claim
-- the pick (ZRANGE 0 0), the tenant's pass (ZINCRBY), its weight (HGET, once per call and tenant, none
-- when the queue's tenancy setting gives it one: that setting is read with the queue's other settings
-- and decoded once per call) and its counters (HINCRBY, PEXPIRE, ZADD, ZREMRANGEBYSCORE, and two HINCRBY
-- of its minute's count, whose PEXPIREAT is once per call); a tenant found with nothing ready costs a pop
-- and an EXISTS; a tenant with a concurrency in the queue adds per claim a ZCOUNT of its slots, an SREM
-- and a ZADD, and one at its cap a ZREM and SADD (it parks, counted against FETCH's MAX_SKIPS).
-- CAPS: Tenant.turn (explain) looks at the first TURN_LOOK = 100 tenants ahead of one.
local TENANT_STATS_MS = 30 * 86400000
local TENANT_MINUTES_KEEP = 62
-- Tenants ahead in the fair share that Tenant.turn looks at one by one (explain).
local TURN_LOOK = 100
local Tenant = {}

-- Tenant.count(P, tenant, field, now): one more of `field` for the tenant (see above).
function Tenant.count(P, tenant, field, now)
  local k = key_tenant_stats(P, tenant)
  incr(k, field, 1)
  redis.call('PEXPIRE', k, TENANT_STATS_MS)
  local tk = key_tenants(P)
  redis.call('ZADD', tk, now, tenant)
  redis.call('ZREMRANGEBYSCORE', tk, '-inf', '(' .. (now - TENANT_STATS_MS))
end

-- Tenant.dispatched(P, tenant, now): one more claim of the tenant's jobs: its counters (Tenant.count)
-- and its minute's count (see above).
function Tenant.dispatched(P, tenant, now)
  Tenant.count(P, tenant, 'dispatched', now)
  local minute = math.floor(now / 60000)
  local mk = key_tenants_minute(P, minute)
  incr(mk, tenant, 1)
  incr(mk, '', 1)
  -- Once per call and key (a memo on the library's top level outlived the call: a second namespace or
  -- shard on the same Redis then never set its minute's expiry, issue 37 item 11).
  if first_in_call(mk) then redis.call('PEXPIREAT', mk, (minute + TENANT_MINUTES_KEEP) * 60000) end
end

-- Tenant.weight_ok(v): a weight as a number when it is one a fair share can use (finite, > 0), else nil
-- (something other than this library wrote it: the default weight is used, so no pass is NaN: issue 40).
function Tenant.weight_ok(v)
  local w = tonumber(v)
  if w and w > 0 and w < 1e9 then return w end
  return nil
end

-- Tenant.queue_weight(tq, tenant): the weight a queue's tenancy setting tq (decoded; nil for none)
-- gives the tenant ('' = the queue's jobs without a tenant: its default_weight); nil when it gives none.
function Tenant.queue_weight(tq, tenant)
  if not tq then return nil end
  if tenant == '' then return Tenant.weight_ok(tq.default_weight) end
  return type(tq.weights) == 'table' and Tenant.weight_ok(tq.weights[tenant]) or nil
end

-- Tenant.part(tenant): how a tenant is spelled in a sub-queue's name (see above).
function Tenant.part(tenant)
  return (string.gsub(tenant, ':', '%%3A'))
end

-- Tenant.sub_queue(queue, tenant): where a job of this queue and tenant waits: the queue itself for none.
function Tenant.sub_queue(queue, tenant)
  if tenant and tenant ~= '' then return queue .. '@' .. Tenant.part(tenant) end
  return queue
end

-- Tenant.base_queue(q): the queue of a queue or sub-queue name, and the tenant (nil for a queue).
function Tenant.base_queue(q)
  local at = string.find(q, '@', 1, true)
  if at then return string.sub(q, 1, at - 1), (string.gsub(string.sub(q, at + 1), '%%3A', ':')) end
  return q, nil
end

-- Tenant.decode_tenancy(raw): a queue's tenancy setting (its conf field 'tenancy', JSON) as a table; nil for
-- none, or for one that does not decode.
function Tenant.decode_tenancy(raw)
  if not raw then return nil end
  local ok, tq = pcall(cjson.decode, raw)
  return ok and type(tq) == 'table' and tq or nil
end

-- Tenant.weight_read(P, tenant): the tenant's fair-share weight ('' = the jobs without a tenant, whose
-- weight is _default's); 1 when unset.
function Tenant.weight_read(P, tenant)
  return Tenant.weight_ok(redis.call('HGET', key_tenant_weights(P), tenant == '' and '_default' or tenant)) or 1
end

-- Tenant.cap(tq, tenant): the tenant's concurrency in a queue whose tenancy setting is tq (decoded; nil
-- for none): its own cap there, else the setting's default_concurrency; nil (no cap) for none, and for
-- '' (the queue's jobs without a tenant).
function Tenant.cap(tq, tenant)
  if not tq or tenant == '' then return nil end
  local own = type(tq.concurrency) == 'table' and tonumber(tq.concurrency[tenant]) or nil
  return own or tonumber(tq.default_concurrency)
end

-- Tenant.join(P, queue, tenant): the tenant ('' for the queue's jobs without one) may have ready jobs
-- in queue: it enters the fair share at the lowest pass present, unless it is parked at its
-- concurrency (see above: it re-joins when a slot comes back). Returns whether it is in the share.
function Tenant.join(P, queue, tenant)
  local tk = key_queue_tenants(P, queue)
  if redis.call('ZSCORE', tk, tenant) then return true end
  if tenant ~= '' and redis.call('SISMEMBER', key_queue_tenants_full(P, queue), tenant) == 1 then return false end
  local low = redis.call('ZRANGE', tk, 0, 0, 'WITHSCORES')
  redis.call('ZADD', tk, low[2] or 0, tenant)
  redis.call('HSET', key_queue_conf(P, queue), 'tenants', '1')
  return true
end

-- Tenant.park(P, queue, tenant): the tenant reached its concurrency in queue (gates.lua Gate.tenant):
-- it leaves the fair share until a slot comes back (see above).
function Tenant.park(P, queue, tenant)
  redis.call('ZREM', key_queue_tenants(P, queue), tenant)
  redis.call('SADD', key_queue_tenants_full(P, queue), tenant)
end

-- Tenant.unpark(P, queue, tenant): a slot of the tenant's came back in queue, or its cap may have moved:
-- a parked tenant re-joins the fair share when its sub-queue has ready jobs (else its next ready job
-- joins it), and the queue is listed in P..'ready' again (a queue whose tenants are all parked leaves
-- it, as one whose lanes are all parked does: FETCH has nothing to take there). Returns whether it was
-- parked.
-- Tenant.sub_check(P, queue, tenant): the tenant leaves the queue's tenants with a sub-queue when nothing
-- of it waits there (no ready set, no lane open or parked): FETCH takes out those it meets in the fair
-- share, and this the others (a tenant parked at its cap, or whose jobs waited in parked lanes only).
function Tenant.sub_check(P, queue, tenant)
  local q = Tenant.sub_queue(queue, tenant)
  if redis.call('EXISTS', key_queue_ready(P, q), key_queue_heads(P, q), key_queue_parked(P, q)) == 0 then
    redis.call('SREM', key_queue_subs(P, queue), tenant)
  end
end

function Tenant.unpark(P, queue, tenant)
  if redis.call('SREM', key_queue_tenants_full(P, queue), tenant) == 0 then return false end
  if redis.call('EXISTS', key_queue_ready(P, Tenant.sub_queue(queue, tenant))) == 1 then
    Tenant.join(P, queue, tenant)
    redis.call('SADD', key_ready_index(P), queue)
  else
    -- Its last jobs may have left while it was parked.
    Tenant.sub_check(P, queue, tenant)
  end
  return true
end

-- Tenant.next(tk): the tenant whose turn it is in a queue's fair share (tk = key_queue_tenants(P, queue)):
-- the lowest pass, ties by name (the sorted set's own order); nil when no tenant may have ready jobs.
-- FETCH's pick.
function Tenant.next(tk)
  return redis.call('ZRANGE', tk, 0, 0)[1]
end

-- Tenant.turn(P, queue, tenant, startable): where the tenant stands in that order (read only, for
-- explain; startable(Tenant.sub_queue) says whether a tenant's sub-queue holds a job FETCH would start): how
-- many tenants come before it (its rank), its pass, the lowest pass and how many tenants share the
-- queue; its turn comes when its rank is 0 (Tenant.next names it). A tenant not in the share (nothing
-- ready: its jobs wait in parked lanes, or '' before FETCH first looked at the queue's own jobs) would
-- join at the lowest pass: rank nil, except '' (it sorts before every name: rank 0).
function Tenant.turn(P, queue, tenant, startable)
  local tk = key_queue_tenants(P, queue)
  local n = redis.call('ZCARD', tk)
  local low = redis.call('ZRANGE', tk, 0, 0, 'WITHSCORES')
  local lowest = tonumber(low[2] or 0)
  local pass = redis.call('ZSCORE', tk, tenant)
  if not pass then return tenant == '' and 0 or nil, lowest, lowest, n end
  local rank = redis.call('ZRANK', tk, tenant)
  -- A tenant ahead with nothing FETCH would start is not ahead: FETCH drops it from the share when its
  -- turn comes (nothing ready), or parks the lanes it meets at their keys' limits, and serves the next
  -- tenant in the same call (issue 37 item 6 and the black-box review: explain counted both). The first
  -- TURN_LOOK ahead are looked at; past them every tenant counts, as FETCH may yet find work there.
  local ahead = 0
  if rank > 0 then
    for _, t in ipairs(redis.call('ZRANGE', tk, 0, math.min(rank, TURN_LOOK) - 1)) do
      if startable(Tenant.sub_queue(queue, t)) then ahead = ahead + 1 end
    end
  end
  -- The queue's jobs without a tenant join the share at FETCH's first look, as tenant '' at the lowest
  -- pass, and so first (fetch-1.lua claim_one; '' sorts before every name).
  if tenant ~= '' and not redis.call('ZSCORE', tk, '') and startable(queue) then ahead = ahead + 1 end
  return ahead + math.max(rank - TURN_LOOK, 0), tonumber(pass), lowest, n
end

-- Tenant.ready_put(P, q, score, member): member joins the ready set of q (a queue or a sub-queue); its queue is
-- listed in P..'ready' and, for a sub-queue, its tenant in the fair share (a tenant parked at its
-- concurrency stays out of both until a slot comes back: Tenant.unpark).
function Tenant.ready_put(P, q, score, member)
  redis.call('ZADD', key_queue_ready(P, q), score, member)
  local queue, tenant = Tenant.base_queue(q)
  if tenant and not Tenant.join(P, queue, tenant) then return end
  redis.call('SADD', key_ready_index(P), queue)
end

-- Tenant.claimed(P, queue, tenant, id, lease, weight, now): FETCH claimed job id of the tenant ('' = the
-- queue's jobs without one) in the queue, under a lease until `lease`: the tenant's pass moves on by
-- 1/weight, and a named tenant holds one of its slots in the queue, held as the job's lease is (its end
-- gives it back: leave_active), whether or not the tenant has a cap now: a cap set later counts the
-- jobs already running (issue 37 item 7); the caller notes the slot in the job's record (tslot).
function Tenant.claimed(P, queue, tenant, id, lease, weight, now)
  if tenant ~= '' then redis.call('ZADD', key_queue_rl_active(P, Tenant.sub_queue(queue, tenant)), lease, id) end
  redis.call('ZINCRBY', key_queue_tenants(P, queue), 1 / weight, tenant)
  if tenant ~= '' then Tenant.dispatched(P, tenant, now) end
end
