-- cron-set-1.lua: register a cron entry, or update the one with that name (upsert, OJS cron §8.1).
--
-- KEYS
--   KEYS[1] P..'cron:'..name   hash   def (the registration as JSON), next_run_at (ms; absent while
--                                     disabled), created_at, updated_at, last_run_at, run_count,
--                                     last_job (the id of the job its last firing created), tenant
--                                     (its owner: the tenant that registered it; absent for none)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] name          string the entry's name
--   ARGV[3] def           string the registration as JSON (expression, timezone, job template, …)
--   ARGV[4] next_run_at   ms?    ms, computed by the caller from the expression and Redis TIME; ''
--                                when the entry is disabled (it stays registered and never fires)
--   ARGV[5] tenant        string the tenant the registering request acts as ('' = none), the entry's
--                                owner from now on: a request acting as a tenant replaces only an entry
--                                that is its own (another is 'taken', and nothing is written); one
--                                acting as none replaces any, which then has no owner
-- RETURNS
--   {'ok', created, created_at, last_run_at, run_count}   created 1 for a new entry, 0 for an update;
--                                                          last_run_at '' when it never fired
--   {'taken'}             the entry exists and is not the registering tenant's; nothing changed
-- COST   O(log n)
-- CAPS   no loop
-- CLOCK  Redis TIME (created_at, updated_at)
-- INVARIANTS
--   an entry is in P..'crons' (every name, lexicographic) exactly while its hash exists, and in
--   P..'cron:due' (name by next_run_at) exactly while it has a next_run_at; an update keeps
--   created_at, last_run_at, run_count and last_job (so overlap detection survives re-registration); an
--   entry's owner changes only by a request acting as no tenant
--@include clock

local P, name, def, tenant = ARG.P, ARG.name, ARG.def, ARG.tenant
-- In the canonical text it is stored in (the check read it with tonumber).
local nxt = ARG.next_run_at ~= '' and text(tonumber(ARG.next_run_at)) or ''
local ck = KEYS[1]
if tenant ~= '' and redis.call('EXISTS', ck) == 1 and redis.call('HGET', ck, 'tenant') ~= tenant then
  return {'taken'}
end
local now = now_ms()
local created = redis.call('HSETNX', ck, 'created_at', now)
redis.call('HSET', ck, 'def', def, 'updated_at', now)
if tenant ~= '' then
  redis.call('HSET', ck, 'tenant', tenant)
else
  redis.call('HDEL', ck, 'tenant')
end
if nxt ~= '' then
  redis.call('HSET', ck, 'next_run_at', nxt)
  redis.call('ZADD', key_cron_due(P), nxt, name)
else
  redis.call('HDEL', ck, 'next_run_at')
  redis.call('ZREM', key_cron_due(P), name)
end
redis.call('ZADD', key_crons(P), 0, name)
local f = redis.call('HMGET', ck, 'created_at', 'last_run_at', 'run_count')
return {'ok', created, f[1], f[2] or '', f[3] or '0'}
