-- dead-delete-1.lua: delete a dead-lettered job for good.
--
-- KEYS
--   KEYS[1] P..'dead'     zset   dead-lettered job ids scored by the time they died (ms)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
-- RETURNS
--   {'ok'}
--   {'not_found'}         the job is not in the dead letter set
-- COST   O(log n); a unique job adds a GET (and a DEL) of its key's lock, a checkpoint a DEL
-- CAPS   no loop
-- CLOCK  Redis TIME
-- INVARIANTS
--   the job leaves P..'dead' and its record is deleted in the same script, and so is its uniqueness
--   key's lock when that still names it (includes/unique.lua), and its checkpoint (includes/checkpoint.lua)
--@include clock
--@include emit
--@include active
--@include unique

local P, id = ARG.P, ARG.id
if not redis.call('ZSCORE', KEYS[1], id) then return {'not_found'} end
local jk = key_job(P, id)
local f = rec('HMGET', jk, 'queue', 'type', 'unique', 'cp')
redis.call('ZREM', KEYS[1], id)
rec('DEL', jk)
if f[4] then redis.call('DEL', key_checkpoint(P, id)) end
if f[3] then unique_release(P, f[3], id, 0) end
if f[1] then
    ev_job_deleted(P, id, f[1], f[2], now_ms())
end
return {'ok'}
