-- A fixed-window counter as users write it: add, and give the key its window's TTL when this
-- add made it (the first add of the window). Compared with `CTR.ADD key inc EX ttl`, whose
-- expiry is set by the add that creates the key.
--
-- KEYS[1] counter; ARGV[1] increment, ARGV[2] the window in seconds. Replies the new value.
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
if value == tonumber(ARGV[1]) then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return value
