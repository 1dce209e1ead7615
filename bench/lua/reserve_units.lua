-- Floored decrement with an idempotency ledger that remembers the units granted, as users write
-- it when orders can be refunded (bench/lua/refund.lua gives them back): the first outcome for
-- an order id is recorded in its own key (SET NX EX) as '<units>:<new value>', or '' when
-- refused, and a retry replies with it. Compared with `CTR.DECRFLOOR key amount TOKEN token`.
--
-- KEYS[1] counter, KEYS[2] ledger entry of this order; ARGV[1] amount (> 0), ARGV[2] floor,
-- ARGV[3] ledger lifetime in seconds.
-- Replies with the new value, or nil when refused. A retry replays the first reply, also after
-- a refund (refund.lua marks the entry refunded with a leading 'r').
local done = redis.call('GET', KEYS[2])
if done then
  if done == '' then return false end
  return tonumber(string.match(done, ':(-?%d+)$'))
end
local amount = tonumber(ARGV[1])
local value = tonumber(redis.call('GET', KEYS[1]) or '0')
if value - amount < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], '', 'NX', 'EX', ARGV[3])
  return false
end
local result = redis.call('DECRBY', KEYS[1], amount)
redis.call('SET', KEYS[2], string.format('%d:%d', amount, result), 'NX', 'EX', ARGV[3])
return result
