-- set-aging-2.lua: turn priority aging on (interval in seconds), change it, or turn it off for a queue,
-- and re-score the queue's waiting jobs under the new setting in bounded steps (includes/rescore.lua).
--
-- KEYS
--   KEYS[1] P..'q:'..queue..':conf'    hash   per-queue settings (field 'aging_s', and the re-scoring's
--                                             progress while it runs)
--   KEYS[2] P..'q:'..queue..':ready'   zset   the queue's ready set
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] queue         string the queue
--   ARGV[3] mode          'set'|'step' set: change the setting to aging_s and take the first step; 'step':
--                                take the next step of a re-scoring under way (aging_s ignored)
--   ARGV[4] aging_s       int(1..315360000)? the new interval in seconds; '' turns aging off
-- RETURNS
--   {'ok', rescored, done}   rescored: waiting jobs given a new score by this call; done: 1 when every
--                            waiting job has the setting's score and FETCH serves the queue again, 0 when
--                            more steps are needed ('set' of the setting in force with no re-scoring
--                            under way changes nothing: {'ok', 0, 1})
-- COST   O(k log n) for the k (at most RESCORE_BUDGET = 1,000) jobs re-scored; a queue of n waiting
--        jobs takes about n / 1,000 calls. Aging changes are rare operator acts.
-- CAPS   one step's loop: RESCORE_BUDGET units (includes/rescore.lua); the caller calls again while done
--        is 0, and the promote timer goes on for a queue a caller left half done
-- CLOCK  none (scores derive from each job's stored enqueued_at)
-- INVARIANTS
--   when done, every waiting job's score, in the queue and in its tenants' sub-queues, is aging_score(setting, rank, enqueued_at) (includes/score.lua),
--   so ordering is exactly priority - age / interval, or priority then FIFO with aging off, whatever the
--   setting was when each job became ready, and each open rate-limit lane is headed by its best job
--   under the setting; until then FETCH does not serve the queue, so no job is handed out in an order
--   that mixes two settings; members do not change, so FIFO among equal scores and every index stay as
--   they were
--@include rescore

local P, queue = ARG.P, ARG.queue
if ARG.mode == 'set' then
  local aging = tonumber(ARG.aging_s)
  local old = tonumber(redis.call('HGET', KEYS[1], 'aging_s'))
  if old == aging and redis.call('HEXISTS', KEYS[1], 'rs_phase') == 0 then return {'ok', 0, 1} end
  if aging then
    redis.call('HSET', KEYS[1], 'aging_s', aging)
  else
    redis.call('HDEL', KEYS[1], 'aging_s')
  end
  rescore_start(P, queue)
end
local done, rescored = rescore_step(P, queue)
return {'ok', rescored, done and 1 or 0}
