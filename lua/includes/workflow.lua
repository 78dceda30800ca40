-- Workflows (ojs-workflows: chain, group, batch). A workflow is created by workflow-create-1.lua,
-- advanced here by the script that ends one of its jobs (ACK, NACK, lease expiry, cancel,
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
--                                written with HSETNX, so a job's first end is the one that counts: the
--                                only copy of each result (no job record holds another's)
-- P..'workflows'          zset   workflow ids by created_at (the listing)
-- P..'workflows:closed'   zset   ended workflows whose keys expire, by the time they expire (ms):
--                                wf_close trims both zsets of the due ones, at most WF_TRIM per call
--                                (one whose keys still live waits again, by its keys' PTTL)
-- P..'workflows:sweeping' set    closed workflows with members still to end (Sweeps, below)
-- A member job's record carries wf = W and wf_i = its index, or the callback's name (on_complete...).
-- Jobs that wait for their turn (chain steps after the first, batch callbacks) are 'pending': in no
-- index at all, released by wf_release, which marks in the record how many results it gets
-- (wf_parents: a chain step i the results of steps 0..i-1, a callback every job's). Advancing costs
-- O(1) per ended job (counters, LINDEX), except: a batch's last end visits its at most 3 callbacks; a
-- chain that fails ends at most WF_SWEEP = 500 pending steps per call (Sweeps, below); a close drops
-- at most 3 pending callbacks and trims at most WF_TRIM = 100 expired workflows. The
-- results are read when the job is read (wf_job_reply, by fetch-1.lua and job-read-1.lua): O(parents)
-- for a job with wf_parents (HMGET, at most 1000 fields per call), nothing for any other job.
-- CAPS: a sweep step ends at most WF_SWEEP = 500 members; a close trims at most WF_TRIM = 100
-- index entries; a batch's callbacks are at most 3; results are read 1,000 per HMGET, at most
-- 10,000 (ojs_core::workflow::MAX_WORKFLOW_JOBS).
--@include emit
--@include ready
--@include active

local WF_CALLBACKS = {'on_complete', 'on_success', 'on_failure'}
-- Most expired workflows one close takes out of the listing index (the next closes go on).
local WF_TRIM = 100
-- Most members one sweep step ends (see wf_sweep).
local WF_SWEEP = 500
-- includes/cancel.lua sets it to its cancel_job (defined after this include): a sweep of a cancelled
-- workflow cancels each member as DELETE /jobs/{id} would.
local WF_CANCEL_JOB

-- wf_results(P, W, n): the results of indexes 0..n-1 in order, read with HMGET (at most 1000 fields a
-- call), 'null' for one not there, or nil when none is there (the workflow's keys expired). Each stored
-- result is a JSON value written by the server (an ACK's result, already validated); the server writes
-- the array.
local function wf_results(P, W, n)
  local rk = key_workflow_results(P, W)
  local out, found = {}, false
  for s = 0, n - 1, 1000 do
    local fields = {}
    for i = s, math.min(s + 999, n - 1) do fields[#fields + 1] = i end
    for _, v in ipairs(redis.call('HMGET', rk, unpack(fields))) do
      found = found or v ~= false
      out[#out + 1] = v or 'null'
    end
  end
  if not found then return nil end
  return out
end

-- wf_job_reply(P, jk): a job as a script returns it whole: its record (rec_packed, false for no job),
-- or {record, parent_results} for a job that wf_release gave parents (wf_parents), its parents'
-- results read here from P..'wf:'..W..':results' (written once each, before the release). A job of
-- any other kind costs nothing more (its record is already cached); a record from an older server that
-- holds parent_results itself has no wf_parents and comes back as it is.
local function wf_job_reply(P, jk)
  local packed = rec_packed(jk)
  local f = rec_map(jk) or {}
  local n = num(f.wf_parents)
  if not (f.wf and n) then return packed end
  local results = wf_results(P, f.wf, n)
  if not results then return packed end
  return {packed, results}
end

-- wf_release(P, id, parents, now): a pending job's turn came: available (ready set or lane) or
-- scheduled when it asked for a delay or a time still ahead; it is shown the results of indexes
-- 0..parents-1 (wf_job_reply). Anything but pending is left alone (a callback cancelled before it
-- fired). Returns whether it released the job.
local function wf_release(P, id, parents, now)
  local jk = key_job(P, id)
  local f = rec('HMGET', jk, 'state', 'queue', 'type', 'rank', 'priority', 'rl_key', 'scheduled_at',
    'hold_delay_ms')
  if f[1] ~= 'pending' then return false end
  rec('HSET', jk, 'wf_parents', parents)
  local run_at = math.max(num(f[7], 0), now + num(f[8], 0))
  if run_at > now then
    rec('HSET', jk, 'state', 'scheduled', 'scheduled_at', run_at)
    redis.call('ZADD', key_scheduled(P), run_at, id)
    stat(P, f[2], 'scheduled', 1)
    ev_job_scheduled(P, id, f[2], f[3], now, run_at, nil)
  else
    rec('HSET', jk, 'state', 'available', 'enqueued_at', now)
    make_ready(P, jk, id, f[2], num(f[4]), f[5], now, f[6])
    ev_job_available(P, id, f[2], f[3], now, 'pending')
  end
  return true
end

-- wf_drop(P, id, now, retention_ms, reason): a pending job that will never run (its chain stopped, its
-- callback was not triggered, its workflow closed) ends cancelled. Returns whether it dropped the job.
local function wf_drop(P, id, now, retention_ms, reason)
  local jk = key_job(P, id)
  local f = rec('HMGET', jk, 'state', 'queue', 'type')
  if f[1] ~= 'pending' then return false end
  rec('HSET', jk, 'state', 'cancelled', 'cancelled_at', now)
  stat(P, f[2], 'cancelled', 1)
  ev_job_cancelled(P, id, f[2], f[3], now, 'pending', reason)
  finish(P, jk, id, retention_ms, now)
  return true
end

-- wf_close(P, W, wk, state, now, retention_ms): the workflow reached a terminal state; its keys then
-- live as long as a finished job's record. No pending job outlives its workflow: a batch's callbacks
-- still pending (at most 3) are dropped here (a chain drops its pending steps before it closes, and
-- workflow-cancel-1.lua cancels every member). Returns how many it dropped. Its keys' expiry time goes
-- into P..'workflows:closed', and the entries of up to WF_TRIM workflows whose keys expired leave both
-- zsets (the earliest first: a close always trims what is due, however long older workflows run; an id
-- that names a workflow again, created after the old one expired, keeps its listing entry).
local function wf_close(P, W, wk, state, now, retention_ms)
  redis.call('HSET', wk, 'state', state, 'completed_at', now)
  local w = redis.call('HMGET', wk, 'type', 'name', 'cb_on_complete', 'cb_on_success', 'cb_on_failure')
  local dropped = 0
  for i = 3, 5 do
    if w[i] and wf_drop(P, w[i], now, retention_ms, 'workflow ' .. state) then dropped = dropped + 1 end
  end
  if state == 'completed' then
    ev_workflow_completed(P, '', '', '', now, W, w[1], w[2])
  elseif state == 'failed' then
    ev_workflow_failed(P, '', '', '', now, W, w[1], w[2])
  else
    ev_workflow_cancelled(P, '', '', '', now, W, w[1], w[2])
  end
  local closed = key_workflows_closed(P)
  if retention_ms > 0 then
    for _, k in ipairs({wk, key_workflow_jobs(P, W), key_workflow_results(P, W)}) do redis.call('PEXPIRE', k, retention_ms) end
    redis.call('ZADD', closed, now + retention_ms, W)
  end
  local due = redis.call('ZRANGEBYSCORE', closed, '-inf', now, 'LIMIT', 0, WF_TRIM)
  if #due > 0 then
    redis.call('ZREM', closed, unpack(due))
    for _, old in ipairs(due) do
      -- Gone: out of the listing. Still there (its score came from the script's clock, and Redis keeps a
      -- key until its expiry's millisecond has passed): it waits again until its keys expire.
      local ttl = redis.call('PTTL', key_workflow(P, old))
      if ttl == -2 then
        redis.call('ZREM', key_workflows(P), old)
      elseif ttl > 0 then
        redis.call('ZADD', closed, now + ttl, old)
      end
    end
  end
  return dropped
end

-- Sweeps. A workflow that closes with members still to end (a failed chain: its pending steps; a
-- cancelled workflow: every member that has not ended) ends them in steps of at most WF_SWEEP members:
-- its hash keeps 'sweep' (the next index of its jobs list) and 'sweep_how' ('drop': pending ones end
-- cancelled; 'cancel': each one not ended is cancelled), and P..'workflows:sweeping' lists it until the
-- last step. The closing script takes the first step; workflow-cancel-1.lua's caller takes the next
-- ones, and the promote timer one per tick for a sweep a caller left (a pod that died), so every
-- sweep ends. Meanwhile a pending member whose workflow closed waits in no index (nothing can run it),
-- and FETCH cancels a member of a cancelled workflow it pops instead of claiming it.

-- wf_sweep_start(P, W, wk, how, from): members from index `from` on are to end by `how`.
local function wf_sweep_start(P, W, wk, how, from)
  redis.call('HSET', wk, 'sweep', from, 'sweep_how', how)
  redis.call('SADD', key_workflows_sweeping(P), W)
end

-- wf_sweep(P, W, now, retention_ms): one step: at most WF_SWEEP members, and with the last of them a
-- batch's callbacks (at most 3). Returns done (nothing left to end) and how many jobs it ended.
local function wf_sweep(P, W, now, retention_ms)
  local wk = key_workflow(P, W)
  local s = redis.call('HMGET', wk, 'sweep', 'sweep_how', 'cb_on_complete', 'cb_on_success', 'cb_on_failure')
  if not s[1] then
    redis.call('SREM', key_workflows_sweeping(P), W)
    return true, 0
  end
  local from = tonumber(s[1])
  local ids = redis.call('LRANGE', key_workflow_jobs(P, W), from, from + WF_SWEEP - 1)
  local done = #ids < WF_SWEEP
  if done then
    for i = 3, 5 do
      if s[i] then ids[#ids + 1] = s[i] end
    end
  end
  local ended = 0
  for _, id in ipairs(ids) do
    local e
    if s[2] == 'cancel' then
      e = WF_CANCEL_JOB(P, key_job(P, id), id, retention_ms, now)[1] == 'ok'
    else
      e = wf_drop(P, id, now, retention_ms, 'workflow failed')
    end
    if e then ended = ended + 1 end
  end
  if done then
    redis.call('HDEL', wk, 'sweep', 'sweep_how')
    redis.call('SREM', key_workflows_sweeping(P), W)
  else
    redis.call('HSET', wk, 'sweep', from + WF_SWEEP)
  end
  return done, ended
end

-- wf_callback_ended: a batch callback ended. Before the callbacks fired (no cb_fired yet) only a
-- cancel can end one, while it is pending: that callback is gone and nothing else changes (the batch
-- runs on; wf_release leaves it alone when the others fire, so it is not counted among them). A fired
-- one: the batch completes when every fired callback completed, and fails as soon as one did not.
local function wf_callback_ended(P, W, wk, slot, outcome, now, retention_ms)
  local fired = redis.call('HGET', wk, 'cb_fired')
  if not fired then return end
  if outcome ~= 'completed' then
    redis.call('HSET', wk, 'failed_callback', slot)
    wf_close(P, W, wk, 'failed', now, retention_ms)
  elseif incr(wk, 'cb_done', 1) >= tonumber(fired) then
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
  incr(wk, ok and 'completed' or 'failed', 1)
  if w[1] == 'chain' then
    if not ok then
      -- The chain stops: its steps after the one released last (cursor) are still pending and will
      -- never run; they end in sweep steps (the first one here; wf_drop leaves alone a step that ended
      -- by itself: the failing one may be a pending step cancelled on its own).
      redis.call('HSET', wk, 'failed_step', idx)
      wf_sweep_start(P, W, wk, 'drop', (tonumber(redis.call('HGET', wk, 'cursor')) or 0) + 1)
      wf_sweep(P, W, now, retention_ms)
      wf_close(P, W, wk, 'failed', now, retention_ms)
    elseif idx + 1 < total then
      redis.call('HSET', wk, 'cursor', idx + 1)
      wf_release(P, redis.call('LINDEX', key_workflow_jobs(P, W), idx + 1), idx + 1, now)
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
  local fired = 0
  for _, name in ipairs(WF_CALLBACKS) do
    local id = redis.call('HGET', wk, 'cb_' .. name)
    if id then
      if fire[name] then
        if wf_release(P, id, total, now) then fired = fired + 1 end
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
