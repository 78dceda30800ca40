-- queue-pause-1.lua: pause or resume a queue. FETCH skips a queue in P..'paused' inside its own script,
-- so a pause takes effect atomically with every claim (a claim runs wholly before or after it).
--
-- KEYS
--   KEYS[1] P..'paused'   set    names of the paused queues
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] queue         string the queue
--   ARGV[3] paused        flag   1 pauses the queue, 0 resumes it
-- RETURNS
--   {'ok', now_ms}
-- COST   O(1)
-- CAPS   no loop
-- CLOCK  Redis TIME
-- INVARIANTS
--   the queue is known (P..'queues') from then on; one event, queue.paused or queue.resumed, with the
--   script's time, whether or not the queue was paused before (pausing twice is not an error)
--@include clock
--@include emit

local P, queue = ARG.P, ARG.queue
local now = now_ms()
redis.call('SADD', key_queues(P), queue)
if ARG.paused == '1' then
  redis.call('SADD', KEYS[1], queue)
  ev_queue_paused(P, '', queue, '', now)
else
  redis.call('SREM', KEYS[1], queue)
  ev_queue_resumed(P, '', queue, '', now)
end
return {'ok', now}
