-- Releases a claim (forge_core::fence::released): when the session's fence record
-- (KEYS[1]) holds epoch ARGV[1], its lease ends ('expires' 0) and the epoch stays;
-- otherwise nothing changes. Epochs compare as numbers; the caller sends '-1' for an
-- epoch no record can hold. Returns 1 when it released, else 0.
local key = KEYS[1]
local epoch = redis.call('HGET', key, 'epoch')
if epoch and tonumber(epoch) == tonumber(ARGV[1]) then
  redis.call('HSET', key, 'expires', '0')
  return 1
end
return 0
