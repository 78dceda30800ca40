-- place-1.lua: where queues, rate-limit keys and other names live in a deployment of several shards,
-- and who may write a client-chosen name right now. Runs on shard 0, which holds the directory; every
-- other script runs on the shard this one named.
--
-- KEYS
--   KEYS[1] P..'placement'  hash  queue -> shard, written once per queue
-- ARGV
--   ARGV[1] P       string  key prefix of shard 0 'ojs:{ns}:'
--   ARGV[2] shards  int(1..64) the number of shards the calling pod is configured with
--   ARGV[3] kind    'queue'|'key'|'type'|'root'|'find'|'claim'|'release' 'queue', 'key' (a rate-limit key), 'type' (a job type whose unique or dedup
--                           policies leave `queue` out of their key), 'root' (a root-job signature
--                           hash); 'find' reads where queues live without placing any (-1: never used,
--                           so no data anywhere); 'claim' takes, and 'release' gives back, a lease on a
--                           client-chosen name ('job:<id>', 'wf:<id>', 'cron:<name>') for one shard
--   ARGV[4..] one NAME record per name
--   record NAME
--     +0  name  string  the queue, key, type, root or claimed name
--     +1  shard int(-1..63) for a queue, the operator's pin (--queue-shard) or -1; for a key, a type or a
--                       root, the shard of the queue of the job that carries it; for a claim or a
--                       release, the shard that writes the name
-- RETURNS
--   {'ok', shards, s1, s2, …}   shards: the deployment's number of shards (never less than before);
--                               s<i>: where the i-th name lives (-1: 'find' of a queue never used); for
--                               a claim, the shard that holds it: the one asked for when granted
-- COST   O(n) for n names
-- CAPS   the loop takes the request's own names (one request's queues, jobs or workflow members)
-- CLOCK  none
-- INVARIANTS
--   P..'shards' only grows (a shard once used may hold jobs, so it is never dropped from the set
--   timers and listings visit);
--   a queue is placed once and stays there: on shard 0 when shard 0 already knows it (P..'queues':
--   used before placements were recorded), else on its pin, else on the stable hash of its name
--   modulo the number of shards at that moment; adding shards moves no queue, so no job is lost or
--   stranded;
--   a rate-limit key is bound once, to the shard of the first queue whose job carries it, or to shard
--   0 when shard 0 already knows it (P..'rl:keys': jobs on shard 0 of a one-shard deployment carry
--   keys without binding them); the caller refuses a job whose queue lives elsewhere, so a key's
--   counters are never split; a type is bound once, to the shard of the first queue whose job
--   carries such a policy (P..'unique:home'), so its uniqueness and deduplication keys are checked on
--   one shard; a root signature is bound to the shard of the first job that carries it, for as long as
--   its root record may live (P..'home:root:'..hash, ROOT_KEEP_MS after its last use);
--   a claim (P..'claim:'..name: shard, holders) is granted to one shard at a time: any number of
--   writers for that shard hold it together, one for another shard is refused until every holder
--   released it or CLAIM_MS passed (a pod that died mid-request), so two writes of one client-chosen
--   name can never land on two shards (the caller checks the other shards only once it holds it)

local CLAIM_MS = 600000
local ROOT_KEEP_MS = 864000000

local P = ARG.P
arg_layout('place', (#ARGV - ARG.REST + 1) % NAME.STRIDE == 0, 'NAME records')
for i = ARG.REST, #ARGV, NAME.STRIDE do check_NAME(i) end
local count = tonumber(redis.call('GET', key_shard_count(P)) or '1')
if tonumber(ARG.shards) > count then
  count = tonumber(ARG.shards)
  redis.call('SET', key_shard_count(P), count)
end
local out = {'ok', count}
for i = ARG.REST, #ARGV, NAME.STRIDE do
  local name, want = ARGV[i + NAME.name], tonumber(ARGV[i + NAME.shard])
  if ARG.kind == 'queue' or ARG.kind == 'find' then
    local s = redis.call('HGET', KEYS[1], name)
    if not s and redis.call('SISMEMBER', key_queues(P), name) == 1 then
      s = 0
    end
    if not s and ARG.kind == 'queue' then
      if want >= 0 and want < count then
        s = want
      else
        s = tonumber(string.sub(redis.sha1hex(name), 1, 8), 16) % count
      end
    end
    if s and ARG.kind == 'queue' then
      redis.call('HSET', KEYS[1], name, s)
    end
    out[#out + 1] = tonumber(s or -1)
  elseif ARG.kind == 'claim' then
    local k = key_claim(P, name)
    local held = tonumber(redis.call('HGET', k, 'shard'))
    if not held or held == want then
      redis.call('HSET', k, 'shard', want)
      incr(k, 'holders', 1)
      redis.call('PEXPIRE', k, CLAIM_MS)
      held = want
    end
    out[#out + 1] = held
  elseif ARG.kind == 'release' then
    local k = key_claim(P, name)
    if tonumber(redis.call('HGET', k, 'shard')) == want and incr(k, 'holders', -1) <= 0 then
      redis.call('DEL', k)
    end
    out[#out + 1] = want
  elseif ARG.kind == 'root' then
    local k = key_home(P, 'root:' .. name)
    -- A signature shard 0 has a root record of was used before it had to be bound (one shard).
    if redis.call('EXISTS', k) == 0 and redis.call('EXISTS', key_root(P, name)) == 1 then want = 0 end
    redis.call('SET', k, want, 'NX')
    redis.call('PEXPIRE', k, ROOT_KEEP_MS)
    out[#out + 1] = tonumber(redis.call('GET', k))
  elseif ARG.kind == 'type' then
    redis.call('HSETNX', key_unique_home(P), name, want)
    out[#out + 1] = tonumber(redis.call('HGET', key_unique_home(P), name))
  else
    local s = redis.call('HGET', key_rl_home(P), name)
    if not s then
      -- A key shard 0 already knows was used before it had to be bound (one shard, nothing to bind).
      s = redis.call('ZSCORE', key_rl_keys(P), name) and 0 or want
      redis.call('HSET', key_rl_home(P), name, s)
    end
    out[#out + 1] = tonumber(s)
  end
end
return out
