-- webhook-sub-set-1.lua: create a webhook subscription, or replace the definition of an existing one
-- (ojs-webhooks §6.1, §6.4). Subscriptions are deployment-wide: they live on shard 0.
--
-- KEYS
--   KEYS[1] P..'wh:subs'   hash   subscription id -> its definition as JSON (crates/ojs-server/src/webhooks.rs)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (shard 0's)
--   ARGV[2] id            string the subscription's id (a UUID the server made)
--   ARGV[3] def           string the subscription as JSON, validated by the server
--   ARGV[4] mode          'create'|'update' create a new one, or replace one that exists
--   ARGV[5] max_subs      int(1..100000) how many subscriptions a deployment may hold
-- RETURNS
--   {'ok', before}        written; before: how many subscriptions there were before the call
--   {'full', count}       a create refused: max_subs already exist; nothing written
--   {'not_found'}         an update of a subscription that does not exist (deleted meanwhile); nothing written
-- COST   O(1)
-- CAPS   no loop
-- CLOCK  none (the server stamps created_at and updated_at from Redis TIME before the call)
-- INVARIANTS
--   the deployment never holds more than max_subs subscriptions, however many pods create at once; an
--   update never brings back a subscription a concurrent delete removed

local pk = KEYS[1]
local before = redis.call('HLEN', pk)
if ARG.mode == 'create' then
  if before >= tonumber(ARG.max_subs) then return {'full', before} end
elseif redis.call('HEXISTS', pk, ARG.id) == 0 then
  return {'not_found'}
end
redis.call('HSET', pk, ARG.id, ARG.def)
return {'ok', before}
