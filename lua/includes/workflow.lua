-- Workflows (ojs-workflows: chain, group, batch). A workflow is created by enqueue-1.lua's 'workflow'
-- mode, advanced here by the script that ends one of its jobs (ACK, NACK, lease expiry, cancel,
-- expiry, drop), in that same script, and cancelled by workflow-cancel-1.lua.
--
-- P..'wf:'..W             hash   type (chain|group|batch), name, state (running|completed|failed|
--                                cancelled), total (steps or jobs, callbacks excluded), completed and
--                                failed (counters of ended jobs), created_at, started_at (first claim),
--                                completed_at (ms); chain: cursor (index of the step released last),
--                                failed_step; batch: cb_on_complete / cb_on_success / cb_on_failure
--                                (callback job ids), cb_fired, cb_done, failed_callback
-- P..'wf:'..W..':jobs'    list   the steps (chain) or jobs (group, batch) in order
-- P..'wf:'..W..':results' hash   index -> result JSON ('null' when none or failed) of each ended job;
--                                written with HSETNX, so a job's first end is the one that counts
-- P..'workflows'          zset   workflow ids by created_at
-- A member job's record carries wf = W and wf_i = its index, or the callback's name (on_complete...).
-- Jobs that wait for their turn (chain steps after the first, batch callbacks) are 'pending': in no
-- index at all, released by wf_release. Advancing costs O(1) per ended job (counters, LINDEX), except
-- the ends that release work: a chain step gets the results before it (O(step)), a batch's callbacks
-- get all of its results (O(jobs), once per batch).
--@include emit
--@include ready
--@include active

local WF_CALLBACKS = {'on_complete', 'on_success', 'on_failure'}

-- wf_results(P, W, n): the results of indexes 0..n-1 as a JSON array text. Each stored result is a JSON
-- value written by the server (an ACK's result, already validated), so joining them is well-formed.
local function wf_results(P, W, n)
  local got = redis.call('HGETALL', key_workflow_results(P, W))
  local by = {}
  for i = 1, #got, 2 do by[tonumber(got[i])] = got[i + 1] end
  local out = {}
  for i = 0, n - 1 do out[#out + 1] = by[i] or 'null' end
  return '[' .. table.concat(out, ',') .. ']'
end

-- wf_release(P, id, parent_results, now): a pending job's turn came: available (ready set or lane) or
-- scheduled when it asked for a delay or a time still ahead. Anything but pending is left alone.
local function wf_release(P, id, parent_results, now)
  local jk = key_job(P, id)
  local f = rec('HMGET', jk, 'state', 'queue', 'type', 'rank', 'priority', 'rl_key', 'scheduled_at',
    'hold_delay_ms')
  if f[1] ~= 'pending' then return end
  if parent_results then rec('HSET', jk, 'parent_results', parent_results) end
  local run_at = math.max(tonumber(f[7]) or 0, now + (tonumber(f[8]) or 0))
  if run_at > now then
    rec('HSET', jk, 'state', 'scheduled', 'scheduled_at', run_at)
    redis.call('ZADD', key_scheduled(P), run_at, id)
    stat(P, f[2], 'scheduled', 1)
    emit(P, 'job.scheduled', id, f[2], f[3], now, cjson.encode({scheduled_at = run_at}))
  else
    rec('HSET', jk, 'state', 'available', 'enqueued_at', now)
    make_ready(P, jk, id, f[2], tonumber(f[4]), f[5], now, f[6])
    emit(P, 'job.available', id, f[2], f[3], now, '{"from":"pending"}')
  end
end

-- wf_drop(P, id, now, retention_ms, reason): a pending job that will never run (its chain stopped, its
-- callback was not triggered) ends cancelled.
local function wf_drop(P, id, now, retention_ms, reason)
  local jk = key_job(P, id)
  local f = rec('HMGET', jk, 'state', 'queue', 'type')
  if f[1] ~= 'pending' then return end
  rec('HSET', jk, 'state', 'cancelled', 'cancelled_at', now)
  stat(P, f[2], 'cancelled', 1)
  emit(P, 'job.cancelled', id, f[2], f[3], now, cjson.encode({previous_state = 'pending', reason = reason}))
  finish(P, jk, id, retention_ms)
end

-- wf_close(P, W, wk, state, now, retention_ms): the workflow reached a terminal state; its keys then
-- live as long as a finished job's record. Also drops up to 10 index entries of workflows that expired.
local function wf_close(P, W, wk, state, now, retention_ms)
  redis.call('HSET', wk, 'state', state, 'completed_at', now)
  local w = redis.call('HMGET', wk, 'type', 'name')
  emit(P, 'workflow.' .. state, '', '', '', now, cjson.encode({workflow_id = W, type = w[1], name = w[2]}))
  if retention_ms > 0 then
    for _, k in ipairs({wk, key_workflow_jobs(P, W), key_workflow_results(P, W)}) do redis.call('PEXPIRE', k, retention_ms) end
  end
  for _, old in ipairs(redis.call('ZRANGE', key_workflows(P), 0, 9)) do
    if redis.call('EXISTS', key_workflow(P, old)) == 0 then redis.call('ZREM', key_workflows(P), old) end
  end
end

-- wf_callback_ended: a fired batch callback ended; the batch completes when every fired callback
-- completed, and fails as soon as one did not.
local function wf_callback_ended(P, W, wk, slot, outcome, now, retention_ms)
  if outcome ~= 'completed' then
    redis.call('HSET', wk, 'failed_callback', slot)
    wf_close(P, W, wk, 'failed', now, retention_ms)
  elseif redis.call('HINCRBY', wk, 'cb_done', 1) >= tonumber(redis.call('HGET', wk, 'cb_fired') or '0') then
    wf_close(P, W, wk, 'completed', now, retention_ms)
  end
end

-- wf_job_ended(P, W, slot, outcome, result, now, retention_ms): job slot (an index, or a callback's
-- name) of workflow W ended: outcome 'completed' (result: its JSON or '') or 'failed' (discarded,
-- dead-lettered, expired, dropped or cancelled). Called by every script that ends a job, with the
-- job's wf and wf_i fields; W nil (not a workflow job) does nothing.
local function wf_job_ended(P, W, slot, outcome, result, now, retention_ms)
  if not W then return end
  local wk = key_workflow(P, W)
  local w = redis.call('HMGET', wk, 'type', 'state', 'total')
  if w[2] ~= 'running' then return end
  local idx = tonumber(slot)
  if not idx then return wf_callback_ended(P, W, wk, slot, outcome, now, retention_ms) end
  local ok = outcome == 'completed'
  local value = (ok and result and result ~= '') and result or 'null'
  if redis.call('HSETNX', key_workflow_results(P, W), idx, value) == 0 then return end
  local total = tonumber(w[3])
  redis.call('HINCRBY', wk, ok and 'completed' or 'failed', 1)
  if w[1] == 'chain' then
    if not ok then
      -- The chain stops: its steps still waiting will never run (wf_drop leaves the others alone; a
      -- pending step can also end first, when it is cancelled by itself).
      redis.call('HSET', wk, 'failed_step', idx)
      for _, id in ipairs(redis.call('LRANGE', key_workflow_jobs(P, W), 0, -1)) do
        wf_drop(P, id, now, retention_ms, 'workflow failed')
      end
      wf_close(P, W, wk, 'failed', now, retention_ms)
    elseif idx + 1 < total then
      redis.call('HSET', wk, 'cursor', idx + 1)
      wf_release(P, redis.call('LINDEX', key_workflow_jobs(P, W), idx + 1), wf_results(P, W, idx + 1), now)
    else
      wf_close(P, W, wk, 'completed', now, retention_ms)
    end
    return
  end
  -- group, batch: the last job to end decides (exactly once: the counters only move here).
  local c = redis.call('HMGET', wk, 'completed', 'failed')
  local completed, failed = tonumber(c[1]) or 0, tonumber(c[2]) or 0
  if completed + failed ~= total then return end
  if w[1] == 'group' then
    wf_close(P, W, wk, failed > 0 and 'failed' or 'completed', now, retention_ms)
    return
  end
  local fire = { on_complete = true, on_success = failed == 0, on_failure = failed > 0 }
  local results, fired = nil, 0
  for _, name in ipairs(WF_CALLBACKS) do
    local id = redis.call('HGET', wk, 'cb_' .. name)
    if id then
      if fire[name] then
        results = results or wf_results(P, W, total)
        wf_release(P, id, results, now)
        fired = fired + 1
      else
        wf_drop(P, id, now, retention_ms, 'callback not triggered')
      end
    end
  end
  if fired == 0 then
    wf_close(P, W, wk, failed > 0 and 'failed' or 'completed', now, retention_ms)
  else
    redis.call('HSET', wk, 'cb_fired', fired)
  end
end
