-- lane-index-2.lua: index one rate-limit lane an older build parked (a pod's start-up, job_migrate.rs
-- index_parked_lanes) in its key's parked lanes, if it is still parked.
--
-- KEYS
--   KEYS[1] P..'q:'..queue..':parked'   hash   the queue's parked lanes (key -> wake and strategy)
--   KEYS[2] P..'rl:'..key..':parked'    zset   the key's parked lanes (queue -> when it parked)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] queue         string the queue (or a tenant's sub-queue) of the lane
--   ARGV[3] key           string the rate-limit key of the lane
-- RETURNS
--   {'ok', added}         added: 1 when the lane was indexed now, 0 when it was already indexed or is
--                         no longer parked
-- COST   O(log n) in the key's parked lanes
-- CAPS   no loop
-- CLOCK  none
-- INVARIANTS
--   a lane is indexed only while it is parked: the start-up scan reads the parked hashes with one
--   command and indexes each lane with this script, so a lane re-opened in between (its last job
--   claimed or cancelled, a release) is not indexed after it left (a stale entry names a lane that is
--   not parked and, for a key that holds no slot, would never be taken out); an indexed lane keeps its
--   place (NX), an older build's goes first (score 0), as lua/includes/ratelimit.lua Lane.wake reads it

if redis.call('HEXISTS', KEYS[1], ARG.key) == 0 then return {'ok', 0} end
return {'ok', redis.call('ZADD', KEYS[2], 'NX', 0, ARG.queue)}
