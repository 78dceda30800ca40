-- job-read-1.lua: the API's reads of job records (one job, a page of jobs, a few fields of many jobs).
-- Whole jobs come back as their records, decoded by the server as FETCH's are (store.rs decode_record).
--
-- KEYS
--   KEYS[1] P..'job:'..id  string the first job's record (gives the call its slot)
-- ARGV
--   ARGV[1] P             string key prefix 'ojs:{ns}:'
--   ARGV[2] nfields       int(0..100) 0: each job comes back whole, as its record (the MessagePack map of
--                                includes/record.lua); n > 0: as the values of the n field names that follow
--   ARGV[3..2+nfields] the field names; then the job ids, at least one
-- RETURNS
--   {'ok', job_1, ..., job_m}    one per id, in order; a job that does not exist is false (whole) or
--                                n false values (fields); a whole workflow job with parents (a chain
--                                step after the first, a batch callback, once released) is
--                                {record, parent_results}: the JSON array of its parents' results, read
--                                from the workflow's results hash (includes/workflow.lua wf_job_reply)
-- COST   O(1) per job: one GET and one unpack; a whole workflow job with parents adds one HMGET of its
--        parents' results per 1000 of them
-- CAPS   the ids given (a page: at most 1,000); a workflow step's parents: at most 10,000 results,
--        read 1,000 per HMGET
-- CLOCK  none
-- INVARIANTS
--   writes nothing, except that a v1 hash read here is rewritten as a record (includes/record.lua)
--@include workflow

local P, nfields = ARG.P, tonumber(ARG.nfields)
local fields = {}
for i = 0, nfields - 1 do fields[i + 1] = ARGV[ARG.REST + i] end
local out = {'ok'}
for i = ARG.REST + nfields, #ARGV do
  local jk = key_job(P, ARGV[i])
  if nfields == 0 then
    out[#out + 1] = wf_job_reply(P, jk)
  else
    out[#out + 1] = rec('HMGET', jk, unpack(fields))
  end
end
return out
