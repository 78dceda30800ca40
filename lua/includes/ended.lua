-- Ended jobs, findable (issue 41): every job that ends (completed, cancelled, or discarded without the
-- dead letter: a dead-lettered job is in P..'dead') joins its queue's P..'q:'..queue..':ended', a zset
-- of job ids scored by the time they ended (ms), which the admin listing reads newest first
-- (crates/ojs-server/src/listing.rs). The queue's retention setting bounds it (P..'q:'..queue..':conf'
-- ke_last: keep the last N, default ENDED_KEEP_LAST; ke_for: keep for a duration, ms), and so does the
-- records' own retention: an entry outlives neither. The key expires with the last record it names.
--
-- Costs per ending: a ZADD and a ZREMRANGEBYRANK (O(log n), plus the entries it removes); per call and
-- queue, once (CALL_MEMO: a group-committed ACK call ends many jobs of a queue): an HMGET of the
-- queue's two settings and, with a time bound, a ZREMRANGEBYSCORE and a PEXPIRE (the call's endings
-- share its clock, so once is the same as at each). With keep_last 0, the HMGET and a DEL.
-- CAPS: no loop; the entries one ending removes are those past the bounds (one, in the steady state).
local Ended = {}

-- The default and the largest `keep the last N` (a queue's setting is checked against it by the server).
local ENDED_KEEP_LAST = 10000

-- Ended.add(P, queue, id, now, retention_ms): the job id of queue ended at now; its record is kept for
-- retention_ms (0 = forever).
function Ended.add(P, queue, id, now, retention_ms)
  local ek = key_queue_ended(P, queue)
  local memo = CALL_MEMO[ek]
  if not memo then
    local c = redis.call('HMGET', key_queue_conf(P, queue), 'ke_last', 'ke_for')
    local keep_for = tonumber(c[2]) or 0
    if retention_ms > 0 and (keep_for == 0 or retention_ms < keep_for) then keep_for = retention_ms end
    memo = { keep_last = tonumber(c[1]) or ENDED_KEEP_LAST, keep_for = keep_for, fresh = true }
    CALL_MEMO[ek] = memo
  end
  -- keep_last 0: the queue lists none (what an index left from before the setting held goes too).
  if memo.keep_last == 0 then
    if memo.fresh then redis.call('DEL', ek) end
    memo.fresh = false
    return
  end
  redis.call('ZADD', ek, now, id)
  redis.call('ZREMRANGEBYRANK', ek, 0, -(memo.keep_last + 1))
  if memo.fresh and memo.keep_for > 0 then
    redis.call('ZREMRANGEBYSCORE', ek, '-inf', '(' .. (now - memo.keep_for))
    redis.call('PEXPIRE', ek, memo.keep_for)
  end
  memo.fresh = false
end
