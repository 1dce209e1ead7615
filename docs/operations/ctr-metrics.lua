#!lua flags=no-writes,allow-cross-slot-keys
-- redis-ctr metrics for redis_exporter's --script option (docs/OPERATIONS.md).
--
--   prometheus-redis-exporter --redis.addr redis://HOST:PORT --script ctr-metrics.lua
--
-- The exporter runs this script with EVAL on every scrape and turns each (name, value) pair of
-- its reply into a sample of redis_script_values{key="<name>"}. When the script or a value
-- fails, the scrape reports redis_up 0 and redis_exporter_last_scrape_error with the reason
-- (Debian's 1.45; newer exporters also export redis_script_result).
--
-- 1. Every integer field of INFO ctr, under its INFO name: ctr_adds, ctr_gather_failures, ...
--    (all of them, whatever this module version has: the section is copied field by field).
-- 2. For each key of the scraped server's watch list: the numeric figures of CTR.INFO key listed in
--    KEY_FIELDS, named ctr_key_<field>:<key> (e.g. ctr_key_last_drift:orders:paid), with
--    ctr_key_exists:<key> (1: CTR.INFO answered; 0: no such key) and ctr_key_error:<key> (1:
--    CTR.INFO failed: not a counter, a key another node of the cluster serves, or a spread
--    home whose total needs a gather, which cannot wait inside a script).
--    The watch list is the module config ctr.metrics-keys of the scraped server: key names
--    separated by spaces, set without touching this file and without a restart,
--      redis-cli CONFIG SET ctr.metrics-keys "orders:paid sale:stock"
--    (CONFIG REWRITE keeps it; or the load argument metrics-keys "..."). INFO ctr shows it as
--    ctr_watch_keys, where this script reads it. Each exporter scrapes one server: list there
--    the keys that server serves.
--
-- The first line (script flags, Redis 7.0+ and Valkey) declares the script read-only, so that
-- it also runs on replicas, and reading keys of several slots, which a script with flags must
-- declare in a cluster.
--
-- Cost: INFO ctr is a fixed list of integers; each watched key costs one CTR.INFO, run on the
-- server thread while the script runs (a few microseconds for a plain counter). Keep the
-- watch list short: tens of keys, not thousands. Do not list a spread counter's home in a cluster: its
-- CTR.INFO needs a gather from the other masters, which cannot wait inside a script, so each
-- scrape would count a failed gather (ctr_gather_failures). Its holders can be watched one by
-- one (each is a counter of its own, on its own master); its total is read from a client.

-- The CTR.INFO fields exported per watched key (numbers only; a nil field, e.g. floor on a
-- counter without one, is left out).
local KEY_FIELDS = {
  value = true,
  floor = true,
  shards = true,
  tokens = true,
  ledger = true,
  last_drift = true,
  total_abs_drift = true,
  reconciles = true,
  add_rate = true,
  duplicates_ignored = true,
}

local out = {}

local function push(name, value)
  out[#out + 1] = name
  out[#out + 1] = value
end

-- INFO ctr: "ctr_<field>:<integer>" lines (section ctr_stats), and the watch list (section
-- ctr_watch, "ctr_watch_keys:<names separated by spaces>"). Whole lines only, so a key name in
-- the list never reads as a field.
local info = redis.call('INFO', 'ctr')
local watch = {}
for line in string.gmatch(info, '[^\r\n]+') do
  local keys = string.match(line, '^ctr_watch_keys:(.*)$')
  if keys then
    for key in string.gmatch(keys, '%S+') do
      watch[#watch + 1] = key
    end
  else
    local name, value = string.match(line, '^(ctr_[%w_]+):(%-?%d+)$')
    if name then
      push(name, value)
    end
  end
end

-- CTR.INFO replies a flat field/value array to a script (RESP2).
for _, key in ipairs(watch) do
  local reply = redis.pcall('CTR.INFO', key)
  if type(reply) == 'table' and reply.err ~= nil then
    push('ctr_key_exists:' .. key, '0')
    push('ctr_key_error:' .. key, '1')
  elseif type(reply) == 'table' then
    push('ctr_key_exists:' .. key, '1')
    push('ctr_key_error:' .. key, '0')
    for i = 1, #reply - 1, 2 do
      local field, value = reply[i], reply[i + 1]
      if KEY_FIELDS[field] and type(value) == 'number' then
        push('ctr_key_' .. field .. ':' .. key, string.format('%d', value))
      end
    end
  else
    -- nil (false in Lua): no such key.
    push('ctr_key_exists:' .. key, '0')
    push('ctr_key_error:' .. key, '0')
  end
end

return out
