-- The sorted-set sliding-window limiter users run: one member per allowed request, scored by
-- its time. KEYS[1]; ARGV limit, window (ms), a request id (members must differ), and
-- optionally now (ms; else the server's TIME). Returns 1 when allowed, 0 when limited.
local limit, window, id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then
  return 0
end
redis.call('ZADD', KEYS[1], now, now .. ':' .. id)
redis.call('PEXPIRE', KEYS[1], window)
return 1
