-- MediaWiki's run-time deduplication, applied by FETCH (see docs/architecture.md, "Duplicates"):
--   P..'dedup:'..fp   string '<started_at ms> <job id>': the latest start of a job with deduplication
--                     fingerprint fp (options.dedup; MediaWiki's ignoreDuplicates / getDeduplicationInfo)
--   P..'root:'..sig   string '<ms>': the newest root timestamp of a root job with signature hash sig that
--                     started (options.root_job with is_root; MediaWiki's deduplicateRootJob)
-- Both expire RECORD_TTL_MS after they were last written (MediaWiki keeps root records 10 days too): a
-- job that waited longer than that is no longer recognised as superseded and runs.
-- A popped job with options.dedup whose deduplication info started in another job after it was created,
-- or with options.root_job whose signature's newest started root is newer than its own root timestamp,
-- is never handed out (its verdict is 'superseded': includes/verdict.lua).
-- Costs per FETCH (fetch-1.lua): a job with options.dedup or options.root_job adds one GET when popped
-- and one SET (a root: GET + SET) when claimed.
local RECORD_TTL_MS = 10 * 24 * 3600 * 1000

-- superseded_by(P, id, f): why the job must not run, or nil. f = {dedup, root, root_ts, created_at}
-- (the job's fields). A job is superseded when a job with the same deduplication info started after
-- this one was created (not itself: a retry is not its own duplicate), or when a root job of its
-- signature with a newer timestamp than its own root timestamp started.
local function superseded_by(P, id, f)
  if f.dedup then
    local rec = redis.call('GET', key_dedup(P, f.dedup))
    if rec then
      local at, by = string.match(rec, '^(%d+) (.+)$')
      if by ~= id and num(at, 0) > num(f.created_at, 0) then
        return { reason = 'dedup', by = by, started_at = tonumber(at) }
      end
    end
  end
  if f.root then
    local newest = num(redis.call('GET', key_root(P, f.root)), 0)
    if newest > num(f.root_ts, 0) then
      return { reason = 'root_job', root_timestamp = num(f.root_ts, 0), newest_root_timestamp = newest }
    end
  end
  return nil
end

-- record_start(P, id, f, now): a job with deduplication info or a root job starts: remember it.
local function record_start(P, id, f, now)
  if f.dedup then
    redis.call('SET', key_dedup(P, f.dedup), now .. ' ' .. id, 'PX', RECORD_TTL_MS)
  end
  if f.root and f.root_self then
    local rk = key_root(P, f.root)
    local newest = tonumber(redis.call('GET', rk) or '0')
    redis.call('SET', rk, math.max(newest, num(f.root_ts, 0)), 'PX', RECORD_TTL_MS)
  end
end
