-- promote-1.lua: move due scheduled and retryable jobs into their queues' ready sets, and the timer's
-- other bounded chores: re-open parked lanes whose wake came, drop idle rate-limit keys from the key
-- listing, and take one step of a re-scoring or a workflow sweep a pod left half done.
--
-- KEYS
--   KEYS[1] P..'scheduled'  zset  scheduled and retryable job ids scored by run-at time (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] limit         int(1..100000) most jobs to move in this call (bounds the script's run time)
--   ARGV[3] retention_ms  ms    retention of a job discarded because its expires_at passed
-- RETURNS
--   {'ok', moved, next_due_ms, now_ms}   next_due_ms is the earliest remaining run-at or lane wake
--                                         time, or -1; now_ms is Redis TIME, so a caller can tell how
--                                         far away next_due_ms is without consulting its own clock
-- COST   O(k log n) for k moved jobs, woken lanes and dropped idle rate-limit keys
-- CAPS   each of its three loops (due jobs, due lane wakes, idle rate-limit keys) takes at most
--        ARGV[2] items per call; the lanes of keys whose limits changed: REWAKE_KEYS = 10 keys of
--        LANE_WAKE_MAX = 10 lanes each (ratelimit.lua Lane.wake); one re-scoring step (includes/rescore.lua) at most 1,000 jobs, and
--        one workflow sweep step (includes/workflow.lua) at most 500 members; the rest waits for the
--        next tick
-- CLOCK  Redis TIME
-- INVARIANTS
--   parked rate-limit lanes whose P..'rl:wake' time passed are re-opened (their best job back in
--   the ready set; rate_limit.released);
--   scheduled|retryable -> available (into the ready set with the job's rank and a fresh FIFO
--   sequence) or discarded when expires_at passed (a workflow job's workflow counts it failed); safe to run from every API pod at once, since
--   a job is moved only if it is still in P..'scheduled';
--   a rate-limit key leaves P..'rl:keys' only once its idle time came and its policy, lanes, slot
--   holders and override are all gone (an override or a policy that expires later puts it back in
--   P..'rl:idle' for then: a key still listed is always in P..'rl:idle' or in use); a re-scoring step and a sweep step keep their cursor where they left it, so any pod may take
--   the next one (includes/rescore.lua, includes/workflow.lua)
--@include clock
--@include emit
--@include ready
--@include active
--@include workflow
--@include cancel
--@include rescore
--@include errors

local P = ARG.P
local now = now_ms()
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARG.limit))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local jk = key_job(P, id)
  -- A job whose record is corrupt, or holds no rank to wait by, is set aside.
  local bad = rec_bad(jk)
  local f = bad and {} or rec('HMGET', jk, 'queue', 'type', 'rank', 'expires_at', 'state', 'priority',
    'rl_key', 'wf', 'wf_i')
  if not bad and f[1] and not num(f[3]) then bad = 'rank is not a number' end
  if bad then
    rec_quarantine(P, id, bad, now)
  elseif f[1] then
    stat(P, f[1], 'scheduled', -1)
    if num(f[4], now + 1) <= now then
      rec('HSET', jk, 'state', 'discarded', 'discarded_at', now,
        'error', error_entry(error_json('expired', EXPIRED_ERROR)))
      stat(P, f[1], 'discarded', 1)
      ev_job_expired(P, id, f[1], f[2], now)
      finish(P, jk, id, tonumber(ARG.retention_ms), now)
      wf_job_ended(P, f[8], f[9], 'failed', nil, now, tonumber(ARG.retention_ms))
    else
      rec('HSET', jk, 'state', 'available', 'enqueued_at', now)
      make_ready(P, jk, id, f[1], num(f[3]), f[6], now, f[7])
      ev_job_available(P, id, f[1], f[2], now, f[5])
    end
  end
end
-- Parked rate-limit lanes whose wake time came: put their best job back in the ready set.
local wakes = redis.call('ZRANGE', key_rl_wake(P), '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARG.limit))
for _, m in ipairs(wakes) do
  redis.call('ZREM', key_rl_wake(P), m)
  local queue, key = string.match(m, '^(.-)\n(.*)$')
  Lane.release(P, queue, key, now)
  redis.call('DEL', key_rl_state(P, key))
end
-- Keys whose limits changed while more lanes were parked than one call re-opens (ratelimit.lua
-- Lane.wake_all): LANE_WAKE_MAX more lanes of each of REWAKE_KEYS keys per tick, those that parked before
-- the change (lanes parked since were judged under the new limits).
local REWAKE_KEYS = 10
local rewake = redis.call('ZRANGE', key_rl_rewake(P), '-inf', now, 'BYSCORE', 'LIMIT', 0, REWAKE_KEYS, 'WITHSCORES')
for i = 1, #rewake, 2 do
  local key, at = rewake[i], tonumber(rewake[i + 1])
  local _, more = Lane.wake(P, key, now, at)
  if not more then redis.call('ZREM', key_rl_rewake(P), key) end
end
-- Rate-limit keys idle long enough that their state expired leave the key listing (includes/ratelimit.lua,
-- "Idle keys"); one with an override that has not lapsed stays listed.
for _, key in ipairs(redis.call('ZRANGE', key_rl_idle(P), '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARG.limit))) do
  redis.call('ZREM', key_rl_idle(P), key)
  -- An override, or a policy, that expires later (an override lapses on its own clock; a policy's
  -- expiry may have been set after its idle time): look again then, never forget the key. PTTL 0 is
  -- a key in its last millisecond (Redis expires it once the clock is past its time): still there.
  local later = math.max(redis.call('PTTL', key_rl_ovr(P, key)), redis.call('PTTL', key_rl_policy(P, key)))
  if later >= 0 then
    redis.call('ZADD', key_rl_idle(P), now + later + 1, key)
  elseif redis.call('EXISTS', key_rl_policy(P, key), key_rl_queues(P, key), key_rl_active(P, key), key_rl_ovr(P, key)) == 0 then
    redis.call('ZREM', key_rl_keys(P), key)
  end
end
-- A workflow whose members a closing script left to end (includes/workflow.lua, Sweeps): one step.
local sweeping = redis.call('SRANDMEMBER', key_workflows_sweeping(P))
if sweeping then wf_sweep(P, sweeping, now, tonumber(ARG.retention_ms)) end
-- A queue whose re-scoring (an aging change) a pod left half done: one step (includes/rescore.lua).
local rescoring = redis.call('SRANDMEMBER', key_rescoring(P))
if rescoring then rescore_step(P, rescoring) end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nwake = redis.call('ZRANGE', key_rl_wake(P), 0, 0, 'WITHSCORES')
local next_due = nxt[2] and tonumber(nxt[2]) or -1
if nwake[2] and (next_due < 0 or tonumber(nwake[2]) < next_due) then next_due = tonumber(nwake[2]) end
return {'ok', #due, next_due, now}
