-- set-aging-2.lua: turn priority aging on (interval in seconds), change it, or turn it off for a queue,
-- and re-score every waiting job of the queue under the new setting in the same script.
--
-- KEYS
--   KEYS[1] P..'q:'..queue..':conf'    hash   per-queue settings (field 'aging_s')
--   KEYS[2] P..'q:'..queue..':ready'   zset   the queue's ready set
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] queue         string the queue
--   ARGV[3] aging_s       int    the new interval in seconds; '' turns aging off
-- RETURNS
--   {'ok', rescored}      how many waiting jobs got a new score (0 when the setting did not change)
-- COST   O(n log n) for the n waiting jobs of the queue (its ready set and its rate-limit lanes): one
--        HMGET and one ZADD each; measured in benches/RESULTS.md. Aging changes are rare operator acts.
-- CLOCK  none (scores derive from each job's stored enqueued_at)
-- INVARIANTS
--   after the script, every waiting job's score is aging_score(new setting, rank, enqueued_at)
--   (includes/ready.lua), so ordering is exactly priority - age / interval, or priority then FIFO
--   with aging off, whatever the setting was when each job became ready; members do not change, so
--   FIFO among equal scores and every index stay as they were
--@include ready

local P, queue = ARGV[1], ARGV[2]
local aging = tonumber(ARGV[3])
local old = tonumber(redis.call('HGET', KEYS[1], 'aging_s'))
if old == aging then return {'ok', 0} end
if aging then
  redis.call('HSET', KEYS[1], 'aging_s', aging)
else
  redis.call('HDEL', KEYS[1], 'aging_s')
end

local rescored = 0
local function rescore(zkey)
  local members = redis.call('ZRANGE', zkey, 0, -1)
  local batch = {}
  for _, m in ipairs(members) do
    local f = rec('HMGET', key_job(P, member_id(m)), 'rank', 'enqueued_at')
    if f[1] then
      batch[#batch + 1] = aging_score(aging, tonumber(f[1]), tonumber(f[2]) or 0)
      batch[#batch + 1] = m
    end
    if #batch >= 2000 then
      redis.call('ZADD', zkey, 'XX', unpack(batch))
      rescored = rescored + #batch / 2
      batch = {}
    end
  end
  if #batch > 0 then
    redis.call('ZADD', zkey, 'XX', unpack(batch))
    rescored = rescored + #batch / 2
  end
end

rescore(KEYS[2])
-- Every non-empty lane is open (its key in heads) or parked (in parked).
local seen = {}
for _, h in ipairs({key_queue_heads(P, queue), key_queue_parked(P, queue)}) do
  for _, key in ipairs(redis.call('HKEYS', h)) do
    if not seen[key] then
      seen[key] = true
      rescore(key_queue_lane(P, queue, key))
    end
  end
end
return {'ok', rescored}
