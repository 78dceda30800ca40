-- job-migrate-1.lua: key schema v1 or v2 -> v3 for a batch of job keys: each v1 job hash becomes a
-- record, and each record that holds its cold fields in the outer map (as v2 wrote every record) has
-- them packed apart (includes/record.lua), its TTL kept. Run by the server at start over every job key
-- (SCAN), in batches.
--
-- KEYS
--   KEYS[1] P..'job:'..id  string the first job's key (gives the call its slot)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2..] the job ids
-- RETURNS
--   {'ok', converted}     how many of them were rewritten (v1 hashes and v2 records)
-- COST   O(fields) per job
-- CAPS   the ids given (the server sends 500 per call)
-- CLOCK  none
-- INVARIANTS
--   idempotent: a v3 record or a missing key is left as it is, so racing servers and a restarted
--   migration need no coordination; a job is converted whole, in one script, fields and TTL together

local P = ARG.P
local converted = 0
for i = ARG.REST, #ARGV do
  if rec_convert(key_job(P, ARGV[i])) then converted = converted + 1 end
end
return {'ok', converted}
