-- text(v): a Lua number as the text Redis would store for it: an integer in full (Lua's own tostring
-- writes 1e+15), anything else with 17 significant digits; a string as it is; anything else through
-- tostring (a record value is always a string, as a hash's was).
-- Why every number that leaves Lua goes through here: Lua turns a number into text with '%.14g' (a
-- concatenation) and Redis a numeric redis.call argument with '%.17g', both glibc's float formatting,
-- which costs several times string.format('%d') (benches/layout: 9% of a plain job's FETCH + ACK).
local INT_LIMIT = 2 ^ 53

-- whole(v): the whole number (0 to 10^15 - 1) whose decimal text v is, or nil (v absent, or other text:
-- a stored count something other than this library wrote).
local function whole(v)
  if type(v) == 'string' and #v <= 15 and string.find(v, '^%d+$') then return tonumber(v) end
  return nil
end

-- num(v, default): the finite number the text v holds, else default (nil unless given): a stored number
-- something other than this library wrote (garbage, NaN, an infinity) never reaches arithmetic or Redis.
local function num(v, default)
  local n = tonumber(v)
  if n and n - n == 0 then return n end
  return default
end

-- finite(v): v is a number and neither NaN nor infinite (what every number a script writes must be).
local function finite(v)
  return type(v) == 'number' and v == v and v > -math.huge and v < math.huge
end
local function text(v)
  local t = type(v)
  if t == 'number' then
    -- v % 1 is 0 for an integer: a VM operation, where math.floor would be one more function call.
    if v % 1 == 0 and v > -INT_LIMIT and v < INT_LIMIT then
      return string.format('%d', v)
    end
    return string.format('%.17g', v)
  elseif t == 'string' then
    return v
  end
  return tostring(v)
end
