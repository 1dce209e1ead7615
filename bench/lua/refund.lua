-- Refund of a reservation made by bench/lua/reserve_units.lua, as users write it: gives the
-- units the order's ledger entry recorded back to the counter, once, and marks the entry
-- refunded (a leading 'r', its TTL kept) so that a retry replies the same units again without
-- changing anything. Compared with `CTR.REFUND key TOKEN token`.
--
-- KEYS[1] counter, KEYS[2] ledger entry of the order ('<units>:<new value>', '' when refused).
-- Replies with the units returned, the same on a retry; nil when the order has no grant (no
-- entry: unknown or expired; or the reservation was refused).
local entry = redis.call('GET', KEYS[2])
if not entry or entry == '' then return false end
if string.sub(entry, 1, 1) == 'r' then
  return tonumber(string.match(entry, '^r(%d+):'))
end
local units = tonumber(string.match(entry, '^(%d+):'))
redis.call('INCRBY', KEYS[1], units)
redis.call('SET', KEYS[2], 'r' .. entry, 'KEEPTTL')
return units
