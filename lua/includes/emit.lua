-- emit(P, event_type, job_id, queue, job_type, now, data_json): append one lifecycle event to the
-- deployment's capped stream P..'events' (approximate MAXLEN keeps XADD O(1) amortised).
local EVENTS_MAXLEN = 100000
local function emit(P, etype, job_id, queue, jtype, now, data)
  redis.call('XADD', P .. 'events', 'MAXLEN', '~', EVENTS_MAXLEN, '*',
    'type', etype, 'job_id', job_id, 'queue', queue, 'job_type', jtype, 'time', now, 'data', data or '{}')
end
