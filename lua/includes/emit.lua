-- emit(P, event_type, job_id, queue, job_type, now, data_json): one lifecycle event for the deployment's
-- capped stream P..'events' (approximate MAXLEN keeps XADD O(1) amortised). Events are buffered per call
-- and written at the call's end (emit_flush, from rec_end) as ONE stream entry holding them all, in order:
-- per event the fields type, job_id, queue, job_type, time, data (an event starts at each 'type'). The
-- server gives the k-th event of entry <id> the event id <id> (k = 0) or <id>.<k> (store.rs
-- stream_entries), so one entry per call costs one XADD however many jobs the call moved (a group commit,
-- a batch), and an entry written one event at a time reads as it always did.
-- CAPS: emit_flush writes the call's events 500 per XADD (as many as the call's transitions).
local EVENTS_MAXLEN = 100000
-- Events per entry: XADD's arguments go through unpack, which Lua 5.1 bounds at 8,000 values (a batch of
-- 10,000 jobs writes 20 entries).
local EVENTS_PER_ENTRY = 500
local EV, EV_KEY = {}, nil

local function emit_begin()
  EV, EV_KEY = {}, nil
end

local function emit(P, etype, job_id, queue, jtype, now, data)
  EV_KEY = key_events(P)
  local n = #EV
  EV[n + 1] = 'type'
  EV[n + 2] = etype
  EV[n + 3] = 'job_id'
  EV[n + 4] = job_id
  EV[n + 5] = 'queue'
  EV[n + 6] = queue
  EV[n + 7] = 'job_type'
  EV[n + 8] = jtype
  EV[n + 9] = 'time'
  EV[n + 10] = now
  EV[n + 11] = 'data'
  EV[n + 12] = data or '{}'
end

local function emit_flush()
  local per = EVENTS_PER_ENTRY * 12
  for first = 1, #EV, per do
    redis.call('XADD', EV_KEY, 'MAXLEN', '~', EVENTS_MAXLEN, '*', unpack(EV, first, math.min(first + per - 1, #EV)))
  end
  EV, EV_KEY = {}, nil
end
