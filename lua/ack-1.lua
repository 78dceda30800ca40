-- ack-1.lua: an active job succeeded.
--
-- KEYS
--   KEYS[1] P..'job:'..id   hash   the job
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] result        string JSON result, or '' for none
--   ARGV[4] retention_ms  int    how long the completed job's hash is kept; 0 = forever
--   ARGV[5] lease_id      string the claim the worker acts for ('' = not named; see includes/lease.lua)
--   ARGV[6] attempt       string the attempt the worker was given ('' = not named)
--   ARGV[7] worker_id     string the worker ('' = not named)
-- RETURNS
--   {'ok', now_ms, attempt, queue, type}
--   {'not_found'}
--   {'state', state}      the job is not active (already acked, cancelled, requeued after its lease…)
--   {'lease_lost', state} the request named a claim the job no longer holds; nothing changed
-- COST   O(log n) (ZREM from P..'active')
-- CLOCK  Redis TIME
-- INVARIANTS
--   see includes/ack.lua: active -> completed only, slots and counters released in the same script,
--   an ACK for a job no longer active is refused, never applied twice; an ACK from a fenced-off claim
--   changes nothing
--@include clock
--@include ack

return ack_job(ARGV[1], KEYS[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), now_ms(),
  { lease = ARGV[5], attempt = ARGV[6], worker = ARGV[7] })
