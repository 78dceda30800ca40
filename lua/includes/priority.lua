-- set_priority(P, jk, id, priority, rank, now): change the priority of a job that has not started
-- (PATCH /jobs/{id}, and an enqueue whose unique policy says raise_priority). Returns the script reply
--   {'ok', now, previous_priority, state, queue} | {'not_found'} | {'state', state}
-- Only available and scheduled jobs change. An available job stays in its ready set (or its rate-limit
-- lane, whose head stays its best job) under the same member with the new score, so among equal
-- priorities it keeps its place by original readiness; the per-priority ready counts move with it;
-- emits priority.changed.
--@include emit
--@include ready
--@include counters

local function set_priority(P, jk, id, priority, rank, now)
  local f = rec('HMGET', jk, 'state', 'queue', 'type', 'priority', 'member', 'enqueued_at', 'rl_key', 'tenant')
  local state, queue = f[1], f[2]
  if not state then return {'not_found'} end
  if state ~= 'available' and state ~= 'scheduled' then return {'state', state} end
  if state == 'available' and f[5] then
    local score = ready_score(P, queue, rank, num(f[6], 0))
    local key, q = f[7], Tenant.sub_queue(queue, f[8])
    if key and redis.call('HGET', key_queue_heads(P, q), key) ~= f[5] then
      redis.call('ZADD', key_queue_lane(P, q, key), 'XX', score, f[5])
    else
      redis.call('ZADD', key_queue_ready(P, q), 'XX', score, f[5])
    end
    if key then Lane.rebalance(P, q, key) end
    local pk = key_queue_pri(P, queue)
    count(pk, f[4], -1, true)
    count(pk, priority, 1, true)
  end
  rec('HSET', jk, 'priority', priority, 'rank', rank)
  ev_priority_changed(P, id, queue, f[3], now, f[4], priority)
  return {'ok', now, num(f[4], 0), state, queue}
end
