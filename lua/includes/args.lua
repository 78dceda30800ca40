-- Arguments are checked before a function reads or writes anything: a value a script could not use
-- fails the call while the keyspace is untouched (issue 40: no transition half-happens). build.rs writes
-- the checks from each header's argument types (crates/ojs-store/build/arg_types.rs): at the start of every
-- function, the argument and key counts, each fixed argument, and each key the header names by an
-- expression of the arguments; a script that takes records calls check_<RECORD>(base) for each of them
-- before its first write (build.rs turns the call into the record's checker, and fails the build when a
-- script never calls one).
-- CAPS: no loop (a script checks its records in a loop of its own, capped by its header).

-- arg_refuse(op, name, v, rule): the call ends here, before its first write.
local function arg_refuse(op, name, v, rule)
  error(string.format('ERR %s: argument %s must be %s; got %q', op, name, rule, tostring(v)), 0)
end

-- arg_int(v, lo, hi): v is the text of an integer in lo..hi (tonumber's reading: NaN, infinities and
-- fractions fail; a script that hands such a value on to Redis as it is reads it with tonumber first, or
-- passes it where Redis reads a double). One C call: a pattern match cost as much again, on every field
-- of every job (benches/RESULTS.md, eighteenth session).
local function arg_int(v, lo, hi)
  local n = tonumber(v)
  return n ~= nil and n % 1 == 0 and n >= lo and n <= hi
end

-- arg_number(v, lo, hi): v is the text of a number in lo..hi (not NaN).
local function arg_number(v, lo, hi)
  local n = tonumber(v)
  return n ~= nil and n >= lo and n <= hi
end

-- The record checkers (build.rs): ARG_RECORDS['<op>.<RECORD>'](ARGV, base), ARG_RECORDS['<RECORD>'] for
-- a record an include declares.
local ARG_RECORDS = {}

-- arg_layout(op, ok, what): the arguments after the fixed ones are laid out as the header says (ok: the
-- script's own test of their count), or the call ends.
local function arg_layout(op, ok, what)
  if not ok then arg_refuse(op, 'ARGV', 'laid out as ' .. what, 'another layout') end
end
