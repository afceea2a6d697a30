-- backend::record_once: the value stored under KEYS[1], storing ARGV[1] first when none is.
-- One script, so two first users race safely: one stores, the other reads what it stored.
-- KEYS[1] record key; ARGV[1] value. Returns the stored value (a string).
local stored = redis.call('GET', KEYS[1])
if stored then
  return stored
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
