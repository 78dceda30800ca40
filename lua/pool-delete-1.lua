-- pool-delete-1.lua: remove a worker pool (ojs-fair-scheduling §10.1). Its queues and their jobs are
-- not touched; a FETCH naming the pool afterwards is answered 404.
--
-- KEYS
--   KEYS[1] P..'pool:'..name   hash   the pool (see pool-set-1.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (shard 0's)
--   ARGV[2] name          string the pool's name
-- RETURNS
--   {'ok', pool}          pool is the removed hash as a flat field/value array
--   {'not_found'}
-- COST   O(log n)
-- CAPS   no loop
-- CLOCK  none
-- INVARIANTS
--   the hash and its P..'pools' member go together

local P, name = ARG.P, ARG.name
local pool = redis.call('HGETALL', KEYS[1])
if #pool == 0 then return {'not_found'} end
redis.call('DEL', KEYS[1])
redis.call('ZREM', key_pools(P), name)
return {'ok', pool}
