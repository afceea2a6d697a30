-- backend::record_once on one server (docs/redlock.md, "Records"): reads the record, and stores
-- ARGV[1] first when what is stored now is ARGV[2] ('' = nothing). One script, so two first
-- writers race safely: one stores, the other reads what it stored.
-- KEYS[1] record key; ARGV[1] value to store ('' = only read); ARGV[2] the value it replaces.
-- Returns the stored value afterwards (a string), or nil when none is.
local stored = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' and (stored or '') == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return stored
