-- Leases. Every claim of a job (FETCH, ack-and-fetch-next; strict or weighted) bumps the job's 'claims'
-- counter, which is never decremented (unlike 'attempt', which a requeue or a rate_limit_until give
-- back), so the lease id of a claim, the counter's value as a string, is never reused by a later claim
-- of the same job. The claim also records 'lease_ms', the lease length it chose, which heartbeats
-- extend by unless they ask for another.
--
-- Fencing: ACK, NACK and heartbeat may name the claim they act for, by lease id, or by attempt (and
-- worker id), or by worker id alone. A request that names a claim the job no longer holds (the job
-- is not active, or active under a later claim) is refused and changes nothing. A request that names
-- nothing acts on whoever holds the job now (the official SDKs send only the job id): it cannot be
-- told apart from a stale worker, which is why ojs-client always sends the lease.

-- lease_refusal(f, want): nil when the request may act on the job, else the reply {'lease_lost', state}.
--   f    table: state, claims, attempt, worker_id (the job's fields as stored, or its record map; nil when
--        absent)
--   want table: lease, attempt, worker (strings; '' = not named)
-- Every part the request names must match: a lease id is a small per-job counter, not a secret, so a
-- request naming another worker than the holder is refused even with the right lease id.
local function lease_refusal(f, want)
  if want.lease == '' and want.attempt == '' and want.worker == '' then return nil end
  local lost = {'lease_lost', f.state or 'missing'}
  if f.state ~= 'active' then return lost end
  if want.lease ~= '' and (f.claims or '0') ~= want.lease then return lost end
  if want.attempt ~= '' and (f.attempt or '0') ~= want.attempt then return lost end
  if want.worker ~= '' and f.worker_id and f.worker_id ~= '' and f.worker_id ~= want.worker then return lost end
  return nil
end
