-- A bounded increment with an expiry, as users write it without INCREX: add only when the
-- result stays at or below the upper bound, and set the TTL when the key has none (INCREX's
-- ENX). Compared with `CTR.INCREX key BYINT inc UBOUND ub EX ttl ENX`.
--
-- KEYS[1] counter; ARGV[1] increment, ARGV[2] upper bound, ARGV[3] TTL in seconds.
-- Replies {new value, increment applied} (0 and the value unchanged when it would pass ub).
local inc = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current + inc > tonumber(ARGV[2]) then
  return {current, 0}
end
local value = redis.call('INCRBY', KEYS[1], inc)
if redis.call('TTL', KEYS[1]) == -1 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return {value, inc}
