-- queue-limit-1.lua: set or clear a queue's own limits (PUT/DELETE /admin/queues/{q}/rate-limit).
--
-- KEYS
--   KEYS[1] P..'q:'..queue..':conf'   hash   per-queue settings (fields rl_concurrency, rl_rate_limit,
--                                           rl_rate_period; read by fetch-1.lua before it takes from Q)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] queue         string the queue
--   ARGV[3] concurrency   int    most active jobs of the queue ('' = no concurrency limit)
--   ARGV[4] rate_limit    int    most starts per window ('' = no window)
--   ARGV[5] rate_period   int    the window in ms ('' = no window)
-- RETURNS
--   {'ok'}
-- COST   O(1)
-- CLOCK  none
-- INVARIANTS
--   the old limits are replaced by the new ones in one script, so no FETCH can run between the
--   removal and the write and see the queue without limits; an empty ARGV[3..5] clears them
--   (the counters P..'q:'..queue..':rl:active' and ':rl:win' stay: they expire with their entries)

local conf = KEYS[1]
redis.call('HDEL', conf, 'rl_concurrency', 'rl_rate_limit', 'rl_rate_period')
if ARGV[3] ~= '' then redis.call('HSET', conf, 'rl_concurrency', ARGV[3]) end
if ARGV[4] ~= '' and ARGV[5] ~= '' then
  redis.call('HSET', conf, 'rl_rate_limit', ARGV[4], 'rl_rate_period', ARGV[5])
end
redis.call('SADD', ARGV[1] .. 'queues', ARGV[2])
return {'ok'}
