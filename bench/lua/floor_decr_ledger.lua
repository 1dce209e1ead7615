-- Floored decrement with an idempotency ledger, as users write it today: the first outcome for
-- an order id is recorded in its own key (SET NX EX) and a retry replies with it. Compared with
-- `CTR.DECRFLOOR key amount TOKEN token`.
--
-- KEYS[1] counter, KEYS[2] ledger entry of this order; ARGV[1] amount (> 0), ARGV[2] floor,
-- ARGV[3] ledger lifetime in seconds.
-- Replies with the new value, or nil when refused (a refusal is recorded as an empty string).
local done = redis.call('GET', KEYS[2])
if done then
  if done == '' then return false end
  return tonumber(done)
end
local result = ''
local value = tonumber(redis.call('GET', KEYS[1]) or '0')
if value - tonumber(ARGV[1]) >= tonumber(ARGV[2]) then
  result = redis.call('DECRBY', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[2], result, 'NX', 'EX', ARGV[3])
if result == '' then return false end
return result
