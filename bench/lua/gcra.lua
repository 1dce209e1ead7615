-- GCRA as users run it in Lua (the shape of the widely copied redis-gcra script): KEYS[1] the
-- limiter, ARGV burst, rate (count per period), period (seconds), cost. Returns
-- {limited, remaining, retry_after_ms, reset_after_ms}; the arrival time is a float in seconds,
-- kept with SET PX. The server's TIME is read inside, so the script is replicated as effects.
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local emission = period / rate
local tolerance = emission * burst
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + emission * cost
local allow_at = new_tat - tolerance
local diff = now - allow_at
if diff < 0 then
  return {1, 0, math.ceil(-diff * 1000), math.ceil((tat - now) * 1000)}
end
local reset = new_tat - now
if reset > 0 then
  redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(reset * 1000))
end
return {0, math.floor(diff / emission), -1, math.ceil(reset * 1000)}
