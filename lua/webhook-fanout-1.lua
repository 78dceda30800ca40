-- webhook-fanout-1.lua: turn entries of the shard's event stream into webhook deliveries, one per
-- (event, matching subscription), and acknowledge the entries to the consumer group, in one step
-- (crates/ojs-server/src/webhooks.rs reads the entries with XREADGROUP and matches them).
--
-- KEYS
--   KEYS[1] P..'events'   stream the shard's lifecycle events (includes/emit.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (this shard's)
--   ARGV[2] group         string the consumer group of the webhook pods
--   ARGV[3] entries       string the stream entry ids to acknowledge, separated by spaces ('' = none)
--   ARGV[4] keep_ms       ms     how long a delivery's record and a subscription's log are kept
--   ARGV[5] log_max       int(1..100000) the newest deliveries a subscription's log keeps on this shard
--   ARGV[6..] one DELIVERY record per delivery
--   record DELIVERY
--     +0  id          string the delivery's id (lowercase hex, the same for the same event and subscription)
--     +1  sub         string the subscription's id
--     +2  event_type  string the event's type (the X-OJS-Event-Type header)
--     +3  event_id    string the event's id in the stream
--     +4  body        string the request body, JSON (the OJS event envelope), the same for every attempt
-- RETURNS
--   {'ok', created, acked} created: deliveries written now (a delivery that exists is left as it is);
--                          acked: entries acknowledged
-- COST   O(d log n) for d deliveries, plus O(e) for e entries acknowledged
-- CAPS   the loop takes the call's records: the server sends at most 1,000 per call
-- CLOCK  Redis TIME (created_at, the first due time)
-- INVARIANTS
--   a delivery is written once, whoever turns its entry into deliveries and however often (a pod that
--   stopped between reading and acknowledging an entry leaves it pending; another takes it over with
--   XAUTOCLAIM and writes the same ids); an entry is acknowledged only with its deliveries written, so
--   no event a subscription matched is lost between the stream and the due set; a new delivery is due
--   at once, in P..'wh:due', and listed in its subscription's log
--@include clock

local P = ARG.P
arg_layout('webhook-fanout', (#ARGV - ARG.REST + 1) % DELIVERY.STRIDE == 0, 'DELIVERY records')
for i = ARG.REST, #ARGV, DELIVERY.STRIDE do check_DELIVERY(i) end
local now = now_ms()
local keep = tonumber(ARG.keep_ms)
local due = key_webhook_due(P)
local created = 0
for i = ARG.REST, #ARGV, DELIVERY.STRIDE do
  local id, sub = ARGV[i + DELIVERY.id], ARGV[i + DELIVERY.sub]
  local dk = key_webhook_delivery(P, id)
  if redis.call('EXISTS', dk) == 0 then
    redis.call('HSET', dk, 'sub', sub, 'event_type', ARGV[i + DELIVERY.event_type],
      'event_id', ARGV[i + DELIVERY.event_id], 'body', ARGV[i + DELIVERY.body], 'state', 'pending',
      'attempts', 0, 'created_at', now, 'next_at', now)
    redis.call('PEXPIRE', dk, keep)
    redis.call('ZADD', due, now, id)
    local lk = key_webhook_log(P, sub)
    redis.call('ZADD', lk, now, id)
    redis.call('ZREMRANGEBYRANK', lk, 0, -tonumber(ARG.log_max) - 1)
    redis.call('PEXPIRE', lk, keep)
    created = created + 1
  end
end
local acked = 0
-- CAPS: the entries of one read (the server reads at most 100 at a time).
for entry in string.gmatch(ARG.entries, '%S+') do
  acked = acked + redis.call('XACK', KEYS[1], ARG.group, entry)
end
return {'ok', created, acked}
