-- Smooth weighted round-robin over a FETCH's queues (fetch-1.lua, strategy 'weighted'), its state shared by
-- every node in the hash P..'wrr:'..wrr_key (queue -> current weight), one per distinct list of queues
-- and weights, kept a day past its last use. Over any run of sum(weights) consecutive claims while every
-- listed queue has ready jobs, queue i is chosen exactly weight_i times (the sequence is periodic with
-- that period), and a queue with ready jobs and weight > 0 is chosen within sum(weights) claims, so it
-- never starves.
-- CAPS: one round per claim, at most `want` claims; each round visits the request's queues (its own
-- list, at most 1000); a queue that runs dry leaves the rounds, so at most #queues rounds claim nothing.

local WRR_KEEP_MS = 86400000
local Wrr = {}

-- Wrr.serve(P, wrr_key, queues, weights, live, want, claim_one, stopped): claim up to `want` jobs from
-- the queues (live[i]: queue i may have ready jobs; cleared when it runs dry) by their weights, with
-- claim_one(queue) (true when it claimed one); stops early when stopped() says the call's budget is
-- spent. Returns how many it claimed.
function Wrr.serve(P, wrr_key, queues, weights, live, want, claim_one, stopped)
  local sk = key_wrr(P, wrr_key)
  local cw = {}
  local saved = redis.call('HMGET', sk, unpack(queues))
  for i = 1, #queues do cw[i] = tonumber(saved[i]) or 0 end
  local got = 0
  while got < want do
    local total, best = 0, nil
    for i = 1, #queues do
      if live[i] then
        total = total + weights[i]
        cw[i] = cw[i] + weights[i]
        if not best or cw[i] > cw[best] then best = i end
      end
    end
    if not best then break end
    cw[best] = cw[best] - total
    if claim_one(queues[best]) then
      got = got + 1
    else
      -- The queue ran dry: undo this round as if it had not been eligible, and go again without it.
      cw[best] = cw[best] + total
      for i = 1, #queues do
        if live[i] then cw[i] = cw[i] - weights[i] end
      end
      -- Stopped by the call's budget: the queue is not dry, the request goes on in the next call.
      if stopped() then break end
      live[best] = false
    end
  end
  local flat = {}
  for i = 1, #queues do
    flat[#flat + 1] = queues[i]
    flat[#flat + 1] = cw[i]
  end
  redis.call('HSET', sk, unpack(flat))
  -- One such key per distinct list of queues and weights: it lives a day past its last use.
  redis.call('PEXPIRE', sk, WRR_KEEP_MS)
  return got
end
