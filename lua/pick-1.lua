-- pick-1.lua: weighted FETCH over queues that live on several shards (priority seed §7.2). The queues'
-- jobs are claimed on their own shards, but the smooth weighted round-robin that picks which queue each
-- claim comes from runs here, on shard 0, over one state shared by every pod, exactly as fetch-1.lua
-- runs it over one shard's queues: so any run of sum(weights) consecutive claims while every queue has
-- work takes each queue weight-many times, across shards as on one.
--
-- KEYS
--   KEYS[1] P..'wrr:'..weights   hash   queue -> current weight (the round-robin's state), on shard 0
-- ARGV
--   ARGV[1] P       string  key prefix of shard 0 'ojs:{ns}:'
--   ARGV[2] want    int(0..10000) how many claims to pick
--   ARGV[3] nqueues int(1..1000) how many QUEUE records follow
--   ARGV[4..] the QUEUE records, then the refunds
--   record QUEUE
--     +0  name     string  the queue
--     +1  weight   int(1..1000) > 0
--     +2  was_live flag    1 when the queue was eligible for the picks being refunded ('0' otherwise)
--     +3  live     flag    1 when it is eligible for the new picks (it had ready jobs on its shard and is
--                  not paused)
--   then the refunds: 1-based indexes of queues, one per earlier pick that claimed nothing (the queue
--           ran dry): each such round is undone as if the queue had not been eligible
-- RETURNS
--   {'ok', i_1, ..., i_k}   k <= want 1-based queue indexes, in the order the claims should take; fewer
--                           than want only when no queue is live
-- COST   O(queues) per pick and per refund
-- CAPS   picks: want (the FETCH's count, at most --max-fetch); refunds: the caller's earlier picks
-- CLOCK  none
-- INVARIANTS
--   a round adds every live queue's weight to its current weight, picks the largest, and takes the live
--   total from it; a refund applies the inverse of one such round (its live set was the was_live one),
--   and rounds are vector additions, so refunding one is exact whatever rounds came after it; the state
--   lives a day past its last use (WRR_KEEP_MS)

local WRR_KEEP_MS = 86400000
local want, n = tonumber(ARG.want), tonumber(ARG.nqueues)
local names, weights, was, live = {}, {}, {}, {}
arg_layout('pick', #ARGV >= ARG.REST - 1 + n * QUEUE.STRIDE, 'nqueues QUEUE records, then refunds')
for i = 1, n do check_QUEUE(ARG.REST + (i - 1) * QUEUE.STRIDE) end
for a = ARG.REST + n * QUEUE.STRIDE, #ARGV do
  if not arg_int(ARGV[a], 1, n) then arg_refuse('pick', 'refund', ARGV[a], 'a queue index in 1..nqueues') end
end
for i = 1, n do
  local b = ARG.REST + (i - 1) * QUEUE.STRIDE
  names[i], weights[i] = ARGV[b + QUEUE.name], tonumber(ARGV[b + QUEUE.weight])
  was[i], live[i] = ARGV[b + QUEUE.was_live] == '1', ARGV[b + QUEUE.live] == '1'
end
local cw = {}
local saved = redis.call('HMGET', KEYS[1], unpack(names))
for i = 1, n do cw[i] = tonumber(saved[i]) or 0 end

local function total(set)
  local t = 0
  for i = 1, n do
    if set[i] then t = t + weights[i] end
  end
  return t
end

local refund_total = total(was)
for a = ARG.REST + n * QUEUE.STRIDE, #ARGV do
  local r = tonumber(ARGV[a])
  cw[r] = cw[r] + refund_total
  for i = 1, n do
    if was[i] then cw[i] = cw[i] - weights[i] end
  end
end

local out = {'ok'}
local live_total = total(live)
while #out - 1 < want and live_total > 0 do
  local best = nil
  for i = 1, n do
    if live[i] then
      cw[i] = cw[i] + weights[i]
      if not best or cw[i] > cw[best] then best = i end
    end
  end
  cw[best] = cw[best] - live_total
  out[#out + 1] = best
end

local flat = {}
for i = 1, n do
  flat[#flat + 1] = names[i]
  flat[#flat + 1] = cw[i]
end
redis.call('HSET', KEYS[1], unpack(flat))
redis.call('PEXPIRE', KEYS[1], WRR_KEEP_MS)
return out
