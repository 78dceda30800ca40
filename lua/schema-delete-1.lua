-- schema-delete-1.lua: remove one version of a job type's args schema from the schema registry.
-- Jobs already enqueued with that version are not touched; later enqueues naming it are refused.
--
-- KEYS
--   KEYS[1] P..'args:schemas'   hash   '<type>\n<version>' -> the schema as JSON text (shard 0)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (shard 0's)
--   ARGV[2] job_type      string the job type
--   ARGV[3] version       int(1..2147483647) the version
--   ARGV[4] stamp         string the registry's new stamp (a fresh UUID from the caller)
-- RETURNS
--   {'ok', left}             removed; left = the type's versions still registered
--   {'not_found'}            no such version; nothing changed
-- COST   O(v) for the type's v versions
-- CAPS   the removal loop runs over the type's versions (at most the registry's max_versions)
-- CLOCK  none
-- INVARIANTS
--   a version is in the type's list (P..'args:schemas:versions') exactly when its schema is in
--   P..'args:schemas'; a type with no version left has no list; every change sets
--   P..'args:schemas:stamp' in the same call

--@include schemas

local P, job_type = ARG.P, ARG.job_type
local v = tonumber(ARG.version)
local vk = key_arg_schema_versions(P)
-- Read and checked before the first write.
local list = Schemas.versions(vk, job_type)
if redis.call('HDEL', KEYS[1], job_type .. '\n' .. ARG.version) == 0 then return {'not_found'} end
local kept = {}
for i = 1, #list do
  if list[i][1] ~= v then kept[#kept + 1] = list[i] end
end
if #kept == 0 then
  redis.call('HDEL', vk, job_type)
else
  redis.call('HSET', vk, job_type, cjson.encode(kept))
end
redis.call('SET', key_arg_schemas_stamp(P), ARG.stamp)
return {'ok', #kept}
