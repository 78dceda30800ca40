-- now_ms(): Redis TIME in milliseconds. Every script takes its clock from Redis, never from the caller,
-- so API pods with skewed clocks still agree on leases, schedules and rate windows.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
