-- Arguments are checked before a function reads or writes anything: a value a script could not use
-- fails the call while the keyspace is untouched (issue 40: no transition half-happens). build.rs writes
-- the checks from each header's argument types (crates/ojs-store/build/arg_types.rs): at the start of every
-- function, the argument and key counts, each fixed argument, and each key the header names by an
-- expression of the arguments; a script that takes records calls check_<RECORD>(base) for each of them
-- before its first write (build.rs turns the call into the record's checker, and fails the build when a
-- script never calls one). The checks accept the canonical text only (a decimal integer with no sign but
-- '-' and no spaces), so that what a script hands on to Redis as it is parses there too.
-- CAPS: no loop (a script checks its records in a loop of its own, capped by its header).

-- arg_refuse(op, name, v, rule): the call ends here, before its first write.
local function arg_refuse(op, name, v, rule)
  error(string.format('ERR %s: argument %s must be %s; got %q', op, name, rule, tostring(v)), 0)
end

-- arg_int(v, lo, hi): v is a decimal integer's text in lo..hi.
local function arg_int(v, lo, hi)
  if type(v) ~= 'string' or #v > 17 or not string.find(v, '^%-?%d+$') then return false end
  local n = tonumber(v)
  return n >= lo and n <= hi
end

-- arg_number(v, lo, hi): v is a decimal number's text in lo..hi.
local function arg_number(v, lo, hi)
  if type(v) ~= 'string' or #v > 40 or not string.find(v, '^%-?%d+%.?%d*$') then return false end
  local n = tonumber(v)
  return n >= lo and n <= hi
end

-- The record checkers (build.rs): ARG_RECORDS['<op>.<RECORD>'](ARGV, base), ARG_RECORDS['<RECORD>'] for
-- a record an include declares.
local ARG_RECORDS = {}

-- arg_layout(op, ok, what): the arguments after the fixed ones are laid out as the header says (ok: the
-- script's own test of their count), or the call ends.
local function arg_layout(op, ok, what)
  if not ok then arg_refuse(op, 'ARGV', 'laid out as ' .. what, 'another layout') end
end
