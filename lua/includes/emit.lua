-- emit(P, event_type, job_id, queue, job_type, now, data): one lifecycle event for the deployment's
-- capped stream P..'events' (approximate MAXLEN keeps XADD O(1) amortised). Scripts never call it by
-- name: they call ev_<kind>(P, job_id, queue, job_type, now, part, ...), which build.rs turns into the
-- emit of that kind (ojs-core's event_kinds.rs lists every event type and the members of its data), with
-- data = each part's text after a '\31' (the server writes the event's data JSON from them; no JSON is
-- built here). Events are buffered per call and written at the call's end (emit_flush, from rec_end) as
-- ONE stream entry holding them all, in order, one field per event: the field is the event's type (it
-- always holds a '.'), its value '<job_id> <queue> <job_type> <time ms> <data>' (job ids, queue names
-- and job types never hold a space, and an empty one leaves two spaces; the data is the rest of the
-- value). The server gives the k-th event of entry <id> the event id <id> (k = 0) or <id>.<k>
-- (reads/events.rs each_event), so one entry per call costs one XADD however many jobs the call moved (a
-- group commit, a batch). Entries written before this format (fields type, job_id, queue, job_type,
-- time, data per event), and data written as JSON before the parts, read as they always did.
-- Why one field: per event, 2 arguments of XADD instead of 12 (each one a Lua string turned into a
-- Redis string), 2 bulk strings instead of 12 in every reader's reply, and a smaller stream entry.
--@include text
-- CAPS: emit_flush writes the call's events 500 per XADD (as many as the call's transitions).
local EVENTS_MAXLEN = '100000'
-- Events per entry: XADD's arguments go through unpack, which Lua 5.1 bounds at 8,000 values (a batch of
-- 10,000 jobs writes 20 entries).
local EVENTS_PER_ENTRY = 500
local EV, EV_KEY = {}, nil
-- The call's clock as text, made once per call (every event of a call has the same time).
local EV_NOW, EV_NOW_TEXT = nil, nil

local function emit_begin()
  EV, EV_KEY, EV_NOW, EV_NOW_TEXT = {}, nil, nil, nil
end

-- part_opt(v): an optional part's text: empty for nil or false (ev_<kind> calls use it).
local function part_opt(v)
  if v == nil or v == false then return '' end
  return text(v)
end

local function emit(P, etype, job_id, queue, jtype, now, data)
  EV_KEY = key_events(P)
  local n = #EV
  EV[n + 1] = etype
  if now ~= EV_NOW then EV_NOW, EV_NOW_TEXT = now, text(now) end
  EV[n + 2] = job_id .. ' ' .. queue .. ' ' .. jtype .. ' ' .. EV_NOW_TEXT .. ' ' .. data
end

local function emit_flush()
  local per = EVENTS_PER_ENTRY * 2
  for first = 1, #EV, per do
    redis.call('XADD', EV_KEY, 'MAXLEN', '~', EVENTS_MAXLEN, '*', unpack(EV, first, math.min(first + per - 1, #EV)))
  end
  EV, EV_KEY = {}, nil
end
