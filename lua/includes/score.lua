-- Scores of ready sets and lanes. A ready member is <sequence><job id> (includes/ready.lua); its score
-- is the job's rank, or, when the queue has aging configured (P..'q:'..queue..':conf' field 'aging_s' =
-- interval in seconds), rank * aging_s + ready_since_s. That orders jobs exactly like the effective
-- priority rank - age / interval with a static score, O(log n) like any other. Changing the setting
-- re-scores the queue's waiting jobs (includes/rescore.lua); while that runs (conf field 'rs_phase'),
-- a job moved between a lane and the ready set takes its score under the new setting (moved_score), so
-- no job carries the old one into a set already done.

--@include tenant

-- The job id is the last 36 bytes of a ready member.
local function member_id(member)
  return string.sub(member, -36)
end

-- aging_setting(v): the conf field aging_s as the interval in seconds, or nil for aging off; a value that
-- is no whole number of seconds in range (something other than this library wrote it) is taken as off,
-- so that no score is ever NaN or infinite (issue 40).
local function aging_setting(v)
  local s = v and string.find(v, '^%d+$') and #v <= 10 and tonumber(v)
  if s and s >= 1 then return s end
  return nil
end

-- aging_score(aging_s, rank, since_ms): THE score formula. aging_s nil (aging off): the rank; else
-- rank * aging_s + ready-since in whole seconds, which orders like rank - age / aging_s.
local function aging_score(aging_s, rank, since_ms)
  if aging_s then
    return rank * aging_s + math.floor(since_ms / 1000)
  end
  return rank
end

-- ready_score(P, queue, rank, since_ms): the score a job of this rank, ready since since_ms, gets.
local function ready_score(P, queue, rank, since_ms)
  return aging_score(aging_setting(redis.call('HGET', key_queue_conf(P, queue), 'aging_s')), rank, since_ms)
end

-- moved_score(P, q, member, score): the score a waiting job keeps when it moves between a lane and
-- the ready set of q (a queue or a tenant's sub-queue, whose settings are its queue's): its own, or
-- while the queue is being re-scored, the one its rank and ready-since give under the current setting.
local function moved_score(P, q, member, score)
  local queue = Tenant.base_queue(q)
  if redis.call('HEXISTS', key_queue_conf(P, queue), 'rs_phase') == 0 then return score end
  local f = rec('HMGET', key_job(P, member_id(member)), 'rank', 'enqueued_at')
  if not f[1] then return score end
  local rank = num(f[1])
  if not rank then return score end
  return ready_score(P, queue, rank, num(f[2], 0))
end
