-- checkpoint-read-2.lua: a job's checkpoint, read (ojs-durable-execution).
--
-- KEYS
--   KEYS[1] P..'job:'..id   string the job's record (includes/record.lua)
--   KEYS[2] P..'cp:'..id    hash   the job's checkpoint (includes/checkpoint.lua)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] id            string job id
--   ARGV[3] tenant        string the tenant the request acts as ('' = none): another tenant's job is
--                                'not_found', as if it did not exist
-- RETURNS
--   {'ok', state, attempt, checkpoint}   the job's state and attempt, and Checkpoint.read's reply
--                                        (false: the job has no checkpoint)
--   {'not_found'}
-- COST   O(1)
-- CAPS   no loop
-- CLOCK  none
-- INVARIANTS
--   writes nothing, except that a v1 hash read here is rewritten as a record (includes/record.lua)
--@include checkpoint

local f, refusal = Checkpoint.job(KEYS[1], ARG.tenant, nil)
if not f then return refusal end
return {'ok', f.state or '', f.attempt or '0', Checkpoint.read(KEYS[2])}
