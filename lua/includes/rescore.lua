-- Re-scoring a queue's waiting jobs after its aging setting changed (includes/score.lua), in bounded
-- steps. set-aging-2.lua starts it and takes steps; its caller takes steps until it is done, and the
-- promote timer takes one per tick for a queue left half done (a pod that died meanwhile), so it always
-- finishes.
--
-- While it runs, the queue's conf hash holds 'rs_phase' (ready, heads, parked, subs), 'rs_hcur' (the HSCAN
-- cursor over the lane keys of that hash: '' not started, 'end' done), 'rs_zcur' (the ZSCAN cursor of
-- the set being re-scored) and 'rs_lanes' (lane keys taken from the last HSCAN page and not yet done,
-- the current one first, space-separated: rate-limit keys hold no spaces); the queue is in
-- P..'rescoring'; FETCH does not serve it (fetch-1.lua's queue_blocked), so no job is handed out in an
-- order that mixes the two settings; and a job moved between a lane and the ready set takes its new
-- score then (moved_score). ZSCAN returns every member present for the whole scan at least once, and
-- members added meanwhile are scored under the new setting already, so when the last step ends every
-- waiting job's score is the new setting's.
--
-- Order: the ready set first, then each lane (of the heads hash, then of the parked one), and after a
-- lane is done its head is re-picked (Lane.rebalance): the ready set's heads are already re-scored, so
-- the lane's best under the new setting heads it (seed §8.2). Then the same for each tenant's sub-queue
-- of the queue (includes/tenant.lua), taken from P..'q:'..queue..':subs' by SSCAN pages of 50 (phase
-- 'subs'; 'rs_sub' the tenant being done, '' the queue itself; 'rs_scur' the SSCAN cursor; 'rs_subs'
-- the tenants of the last page not yet done). SSCAN returns every tenant present for the whole scan; a
-- tenant that arrives meanwhile has only jobs scored under the new setting.
--
-- CAPS: one step's loop stops once it has handled RESCORE_BUDGET units (a waiting job re-scored, a
-- ZSCAN page, a page of lane keys read: HSCAN COUNT 50, or a page of tenants: SSCAN COUNT 50); each ZSCAN page asks for at most the units
-- left (COUNT ≤ 200), which Redis treats as a hint, so a step handles about RESCORE_BUDGET jobs.
--@include score
--@include ratelimit
--@include tenant

local RESCORE_BUDGET = 1000

-- rescore_start(P, queue): (re)starts from the beginning under the setting conf holds now.
local function rescore_start(P, queue)
  redis.call('HSET', key_queue_conf(P, queue), 'rs_phase', 'ready', 'rs_hcur', '', 'rs_zcur', '0', 'rs_lanes', '',
    'rs_sub', '', 'rs_scur', '', 'rs_subs', '')
  redis.call('SADD', key_rescoring(P), queue)
end

-- rescore_page(P, zkey, cursor, aging, count): re-scores one ZSCAN page of zkey (COUNT count, at most
-- 200); returns the next cursor and how many members the page held.
local function rescore_page(P, zkey, cursor, aging, count)
  local page = redis.call('ZSCAN', zkey, cursor, 'COUNT', math.max(1, math.min(200, count)))
  local items, batch = page[2], {}
  for i = 1, #items, 2 do
    local f = rec('HMGET', key_job(P, member_id(items[i])), 'rank', 'enqueued_at')
    if f[1] then
      batch[#batch + 1] = aging_score(aging, num(f[1], 0), num(f[2], 0))
      batch[#batch + 1] = items[i]
    end
  end
  if #batch > 0 then redis.call('ZADD', zkey, 'XX', unpack(batch)) end
  return page[1], #items / 2
end

-- rescore_step(P, queue): one bounded step; returns done (true when the queue is served again) and
-- how many jobs it re-scored.
local function rescore_step(P, queue)
  local ck = key_queue_conf(P, queue)
  local st = redis.call('HMGET', ck, 'rs_phase', 'rs_hcur', 'rs_zcur', 'rs_lanes', 'aging_s', 'rs_sub', 'rs_scur',
    'rs_subs')
  local phase, hcur, zcur, lanes = st[1], st[2] or '', st[3] or '0', st[4] or ''
  local aging = aging_setting(st[5])
  local sub, scur, subs = st[6] or '', st[7] or '', st[8] or ''
  -- The queue or the tenant's sub-queue being done.
  local q = Tenant.sub_queue(queue, sub)
  local units, rescored = 0, 0
  while phase and units < RESCORE_BUDGET do
    if phase == 'subs' then
      if subs ~= '' then
        sub = string.match(subs, '^(%S+)')
        subs = string.sub(subs, #sub + 2)
        q = Tenant.sub_queue(queue, sub)
        phase, hcur, zcur, lanes = 'ready', '', '0', ''
      elseif scur ~= 'end' then
        local page = redis.call('SSCAN', key_queue_subs(P, queue), scur == '' and '0' or scur, 'COUNT', 50)
        scur = page[1] == '0' and 'end' or page[1]
        subs = table.concat(page[2], ' ')
        units = units + 1
      else
        phase = nil
      end
    elseif phase == 'ready' then
      local n
      zcur, n = rescore_page(P, key_queue_ready(P, q), zcur, aging, RESCORE_BUDGET - units - 1)
      units, rescored = units + n + 1, rescored + n
      if zcur == '0' then phase, hcur = 'heads', '' end
    elseif lanes ~= '' then
      local key = string.match(lanes, '^(%S+)')
      local n
      zcur, n = rescore_page(P, key_queue_lane(P, q, key), zcur, aging, RESCORE_BUDGET - units - 1)
      units, rescored = units + n + 1, rescored + n
      if zcur == '0' then
        Lane.rebalance(P, q, key)
        lanes = string.sub(lanes, #key + 2)
      end
    elseif hcur == 'end' then
      if phase == 'heads' then phase, hcur = 'parked', '' else phase = 'subs' end
    else
      local h = phase == 'heads' and key_queue_heads(P, q) or key_queue_parked(P, q)
      local page = redis.call('HSCAN', h, hcur == '' and '0' or hcur, 'COUNT', 50)
      hcur = page[1] == '0' and 'end' or page[1]
      local ks = {}
      for i = 1, #page[2], 2 do ks[#ks + 1] = page[2][i] end
      lanes, zcur = table.concat(ks, ' '), '0'
      units = units + 1
    end
  end
  if phase then
    redis.call('HSET', ck, 'rs_phase', phase, 'rs_hcur', hcur, 'rs_zcur', zcur, 'rs_lanes', lanes, 'rs_sub', sub,
      'rs_scur', scur, 'rs_subs', subs)
    return false, rescored
  end
  redis.call('HDEL', ck, 'rs_phase', 'rs_hcur', 'rs_zcur', 'rs_lanes', 'rs_sub', 'rs_scur', 'rs_subs')
  redis.call('SREM', key_rescoring(P), queue)
  return true, rescored
end
