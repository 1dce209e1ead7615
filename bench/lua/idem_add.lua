-- Idempotent add, as users write it today: the token is its own key (SET NX EX), and the add
-- happens only when that SET created it. Compared with `CTR.ADD key delta TOKEN token`.
--
-- KEYS[1] token key, KEYS[2] counter; ARGV[1] delta, ARGV[2] token lifetime in seconds.
-- Replies with the counter's value: after the add, or unchanged for a duplicate.
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[2]) then
  return redis.call('INCRBY', KEYS[2], ARGV[1])
end
return tonumber(redis.call('GET', KEYS[2]) or '0')
