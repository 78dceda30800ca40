-- schema-put-1.lua: register the JSON Schema of a job type's args at one version (the schema registry,
-- ojs-job-versioning §6.1). A version, once registered, is never replaced: delete it first.
--
-- KEYS
--   KEYS[1] P..'args:schemas'   hash   '<type>\n<version>' -> the schema as JSON text (shard 0)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:' (shard 0's)
--   ARGV[2] job_type      string the job type (checked by the caller: ojs_core::names::check_type)
--   ARGV[3] version       int(1..2147483647) the version
--   ARGV[4] schema        string the schema as JSON text (checked by the caller: a valid JSON Schema
--                                within the size bound)
--   ARGV[5] max_versions  int(1..10000) how many versions one type may hold
--   ARGV[6] stamp         string the registry's new stamp (a fresh UUID from the caller)
-- RETURNS
--   {'ok', now_ms}           registered; the registry's stamp is ARGV stamp
--   {'exists'}               that version is registered already; nothing changed
--   {'full', count}          the type holds max_versions versions already; nothing changed
-- COST   O(v) for the type's v versions (the list is decoded, one entry inserted, encoded)
-- CAPS   the insertion loop runs over the type's versions, at most max_versions
-- CLOCK  Redis TIME
-- INVARIANTS
--   a version is in the type's list (P..'args:schemas:versions', ascending) exactly when its schema is
--   in P..'args:schemas'; every change sets P..'args:schemas:stamp' in the same call, so a pod whose
--   cached registry has the old stamp is refused by the enqueue script and reloads it
--@include clock
--@include schemas

local P, job_type = ARG.P, ARG.job_type
local v = tonumber(ARG.version)
local field = job_type .. '\n' .. ARG.version
if redis.call('HEXISTS', KEYS[1], field) == 1 then return {'exists'} end
local vk = key_arg_schema_versions(P)
local list = Schemas.versions(vk, job_type)
if #list >= tonumber(ARG.max_versions) then return {'full', #list} end
local now = now_ms()
local at = #list + 1
for i = 1, #list do
  if list[i][1] > v then at = i; break end
end
table.insert(list, at, {v, now})
redis.call('HSET', vk, job_type, cjson.encode(list))
redis.call('HSET', KEYS[1], field, ARG.schema)
redis.call('SET', key_arg_schemas_stamp(P), ARG.stamp)
return {'ok', now}
