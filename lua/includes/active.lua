-- Active jobs: P..'active' is a sorted set of job ids scored by lease deadline (ms), across all queues;
-- the requeue script walks it from the oldest deadline. P..'q:'..queue..':stats' holds, per queue, two
-- gauges ('active', 'scheduled' = scheduled + retryable) that every script moves in the same script as
-- the index they mirror, so they cannot drift (the invariant checker verifies this), and cumulative
-- counters ('completed', 'failed', 'discarded', 'cancelled') that only ever grow.
--@include counters

--@include ratelimit

--@include unique

--@include tenant

--@include ended

local function stat(P, queue, field, delta)
  count(key_queue_stats(P, queue), field, delta)
end

-- lease_deadline: a lease lasts visibility_ms but never past the execution timeout.
local function lease_deadline(now, visibility_ms, started_at, timeout_ms)
  local d = now + visibility_ms
  if timeout_ms and timeout_ms > 0 and started_at then
    local t = started_at + timeout_ms
    if t < d then d = t end
  end
  return d
end

-- slots_follow(P, id, lease, rl_key, qrl_queue, tslot): a heartbeat moved an active job's lease: the
-- rate-limit slots it holds are leases too and follow it (its key's, when rl_key; its queue's, when
-- qrl_queue; its tenant's in the queue, when tslot: the record's fields of the same names).
local function slots_follow(P, id, lease, rl_key, qrl_queue, tslot)
  if rl_key then redis.call('ZADD', key_rl_active(P, rl_key), 'XX', lease, id) end
  if qrl_queue then redis.call('ZADD', key_queue_rl_active(P, qrl_queue), 'XX', lease, id) end
  if tslot then redis.call('ZADD', key_queue_rl_active(P, tslot), 'XX', lease, id) end
end

-- leave_active(P, jk, id, queue, now, also_del): the job stops being active (ack, nack, cancel, lease
-- expiry); its rate-limit slots (key, queue and its tenant's in the queue) are released in the same
-- script, so they can never leak. also_del is nil or one more field to delete from the job's record.
local function leave_active(P, jk, id, queue, now, also_del)
  redis.call('ZREM', key_active(P), id)
  local w = rec_update(jk)
  local rl_key, qrl, units, spec, tslot, tenant = nil, nil, nil, nil, nil, nil
  if w then
    rl_key, qrl, units, spec, tslot, tenant = w.rl_key, w.qrl, w.rl_units, w.rl, w.tslot, w.tenant
    w.lease_until, w.qrl, w.tslot = nil, nil, nil
    if also_del then w[also_del] = nil end
  end
  if tslot then
    -- A slot of the tenant's concurrency in the queue came back (includes/tenant.lua).
    redis.call('ZREM', key_queue_rl_active(P, tslot), id)
    if tenant then Tenant.unpark(P, queue, tenant) end
    -- A slot of the tenant's pool came back (ratelimit.lua, "Burstable concurrency").
    Pool.wake(P, tslot, now)
  end
  stat(P, queue, 'active', -1)
  if rl_key then RateKey.release(P, rl_key, id, now, (Policy.units_held(units)), spec) end
  if qrl then
    redis.call('ZREM', key_queue_rl_active(P, queue), id)
    -- A slot of the queue's pool came back: the oldest lane the pool holds back may borrow it
    -- (ratelimit.lua, "Burstable concurrency"; one ZPOPMIN of an absent key for a queue with none).
    Pool.wake(P, queue, now)
  end
end

-- finish(P, jk, id, retention_ms, now): a terminal job joins its queue's ended jobs (includes/ended.lua)
-- and keeps its record for retention_ms (0 = forever), and a
-- job with a unique policy its key's lock, if the lock still names it, no longer (includes/unique.lua),
-- and its checkpoint as long.
-- Every ending calls it (ack, discard, cancel, expiry, superseded); a dead-lettered job has not ended.
local function finish(P, jk, id, retention_ms, now)
  local queue = (rec_map(jk) or {}).queue
  if queue then Ended.add(P, queue, id, now, retention_ms) end
  if retention_ms > 0 then
    rec('PEXPIRE', jk, retention_ms)
    local m = rec_map(jk) or {}
    if m.unique then unique_release(P, m.unique, id, retention_ms) end
    -- Its checkpoint (includes/checkpoint.lua) goes with it.
    if m.cp then redis.call('PEXPIRE', key_checkpoint(P, id), retention_ms) end
  end
end
