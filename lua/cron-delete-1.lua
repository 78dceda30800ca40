-- cron-delete-1.lua: remove a cron entry (OJS cron §8.3). Jobs it already created are not touched.
--
-- KEYS
--   KEYS[1] P..'cron:'..name   hash   the entry (see cron-set-1.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] name          string the entry's name
--   ARGV[3] tenant        string the tenant the request acts as ('' = none): an entry that is not its
--                                own (another tenant's, or one without an owner) is 'not_found', and stays
-- RETURNS
--   {'ok', entry}         entry is the removed hash as a flat field/value array
--   {'not_found'}
-- COST   O(log n)
-- CAPS   no loop
-- CLOCK  none
-- INVARIANTS
--   the hash, its P..'crons' member and its P..'cron:due' member go together, so a removed entry
--   never fires again on any pod

local P, name = ARG.P, ARG.name
local entry = redis.call('HGETALL', KEYS[1])
if #entry == 0 then return {'not_found'} end
if ARG.tenant ~= '' and redis.call('HGET', KEYS[1], 'tenant') ~= ARG.tenant then return {'not_found'} end
redis.call('DEL', KEYS[1])
redis.call('ZREM', key_crons(P), name)
redis.call('ZREM', key_cron_due(P), name)
return {'ok', entry}
