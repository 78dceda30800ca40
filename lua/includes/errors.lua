-- How a job record keeps its errors: 'error' (the current one) is one entry, 'errors' (the history) its
-- entries one after another. An entry is a MessagePack array {error JSON, attempt, occurred_at ms}: the
-- error object as the server wrote it (a worker's NACK, validated there) or as error_json makes it, kept
-- as text and never decoded here; a job discarded without running has no attempt and no time. The
-- server writes the API's JSON from the entries (ojs-store reply.rs stored_errors_json); records written
-- before entries hold JSON text, which an entry may follow, and read as they always did.

-- error_json(code, message): the error object of a job the server ended (an expiry, a drop, a timeout).
local function error_json(code, message, etype)
  return cjson.encode({code = code, message = message, type = etype, retryable = etype and true or nil})
end

-- error_entry(err, attempt, now): one entry (attempt and now nil for a job that never ran).
local function error_entry(err, attempt, now)
  return cmsgpack.pack({err, attempt, now})
end

-- The error of a job whose expires_at passed before it started (FETCH and the promoter discard it).
local EXPIRED_ERROR = 'expires_at passed before the job started'
