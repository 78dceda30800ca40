-- pool-set-1.lua: create a worker pool, or replace the definition of the one with that name
-- (ojs-fair-scheduling §6.1, §10.1). Pools are deployment-wide configuration: they live on shard 0.
--
-- KEYS
--   KEYS[1] P..'pool:'..name   hash   def (the pool as JSON: queues, strategy, weights, concurrency),
--                                     created_at, updated_at (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (shard 0's)
--   ARGV[2] name          string the pool's name (checked by the server like a queue name)
--   ARGV[3] def           string the pool's definition as JSON, validated by the server
--   ARGV[4] max_pools     int(1..1000000) how many pools a deployment may hold; a new pool past it is refused
-- RETURNS
--   {'ok', created, created_at, updated_at}   created 1 for a new pool, 0 for an update
--   {'full', count}                           no such pool yet and max_pools already exist; nothing written
-- COST   O(log n)
-- CAPS   no loop
-- CLOCK  Redis TIME (created_at, updated_at)
-- INVARIANTS
--   a pool is in P..'pools' (every name, lexicographic) exactly while its hash exists; an update keeps
--   created_at and replaces def whole, so no FETCH reads half of an old and half of a new pool
--@include clock

local P, name, def = ARG.P, ARG.name, ARG.def
local pk = KEYS[1]
if redis.call('EXISTS', pk) == 0 then
  local n = redis.call('ZCARD', key_pools(P))
  if n >= tonumber(ARG.max_pools) then return {'full', n} end
end
local now = now_ms()
local created = redis.call('HSETNX', pk, 'created_at', now)
redis.call('HSET', pk, 'def', def, 'updated_at', now)
redis.call('ZADD', key_pools(P), 0, name)
return {'ok', created, redis.call('HGET', pk, 'created_at'), now}
