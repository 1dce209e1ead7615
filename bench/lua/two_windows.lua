-- The two-fixed-window approximation of a sliding window (Cloudflare's): the previous window's
-- count weighted by how much of it still overlaps, plus the current one's. KEYS[1] a key prefix;
-- ARGV limit, window (ms), optionally now (ms; else TIME). Returns 1 when allowed, 0 when limited.
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local current = math.floor(now / window)
local elapsed = (now % window) / window
local cur_key = KEYS[1] .. ':' .. current
local prev = tonumber(redis.call('GET', KEYS[1] .. ':' .. (current - 1)) or 0)
local cur = tonumber(redis.call('GET', cur_key) or 0)
if prev * (1 - elapsed) + cur >= limit then
  return 0
end
redis.call('INCR', cur_key)
redis.call('PEXPIRE', cur_key, window * 2)
return 1
