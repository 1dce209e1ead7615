-- Floored decrement, as users write it today: read, compare, decrement. Compared with
-- `CTR.DECRFLOOR key amount`.
--
-- KEYS[1] counter; ARGV[1] amount (> 0), ARGV[2] floor.
-- Replies with the new value, or nil when the decrement would go below the floor.
local value = tonumber(redis.call('GET', KEYS[1]) or '0')
if value - tonumber(ARGV[1]) < tonumber(ARGV[2]) then
  return false
end
return redis.call('DECRBY', KEYS[1], ARGV[1])
