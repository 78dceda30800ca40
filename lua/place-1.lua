-- place-1.lua: where queues and rate-limit keys live in a deployment of several shards. Runs on
-- shard 0, which holds the directory; every other script runs on the shard this one named.
--
-- KEYS
--   KEYS[1] P..'placement'  hash  queue -> shard, written once per queue
-- ARGV
--   ARGV[1] P       string  key prefix of shard 0 'ojs:{ns}:'
--   ARGV[2] shards  int     the number of shards the calling pod is configured with
--   ARGV[3] kind    string  'queue', 'key' (a rate-limit key) or 'type' (a job type whose unique
--                           policies leave `queue` out of the uniqueness key); 'find' reads where
--                           queues live without placing any (-1: never used, so no data anywhere)
--   ARGV[4..] (name, shard) pairs: for a queue, the operator's pin (--queue-shard) or -1; for a key
--           or a type, the shard of the queue of the job that carries it
-- RETURNS
--   {'ok', shards, s1, s2, …}   shards: the deployment's number of shards (never less than before);
--                               s<i>: where the i-th name lives (-1: 'find' of a queue never used)
-- COST   O(n) for n names
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
--   carries such a unique policy (P..'unique:home'), so its uniqueness keys are checked on one shard

local P = ARGV[1]
local count = tonumber(redis.call('GET', key_shard_count(P)) or '1')
if tonumber(ARGV[2]) > count then
  count = tonumber(ARGV[2])
  redis.call('SET', key_shard_count(P), count)
end
local out = {'ok', count}
for i = 4, #ARGV, 2 do
  local name, want = ARGV[i], tonumber(ARGV[i + 1])
  if ARGV[3] == 'queue' or ARGV[3] == 'find' then
    local s = redis.call('HGET', KEYS[1], name)
    if not s and redis.call('SISMEMBER', key_queues(P), name) == 1 then
      s = 0
    end
    if not s and ARGV[3] == 'queue' then
      if want >= 0 and want < count then
        s = want
      else
        s = tonumber(string.sub(redis.sha1hex(name), 1, 8), 16) % count
      end
    end
    if s and ARGV[3] == 'queue' then
      redis.call('HSET', KEYS[1], name, s)
    end
    out[#out + 1] = tonumber(s or -1)
  elseif ARGV[3] == 'type' then
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
