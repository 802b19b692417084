-- Creates group ARGV[1] on stream KEYS[1], reading from its start, unless it exists.
-- Its read counter starts at the number of entries the stream has already dropped, so
-- the counter stays exact (see gap.lua) and entries trimmed before any worker of the
-- group existed are not reported as missed by it. Returns 1 when it created the group.
local stream, group = KEYS[1], ARGV[1]
if redis.call('EXISTS', stream) == 0 then
  redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM', 'ENTRIESREAD', 0)
  return 1
end
if group_info(stream, group) then return 0 end
local info = redis.call('XINFO', 'STREAM', stream)
local dropped = field(info, 'entries-added') - field(info, 'length')
redis.call('XGROUP', 'CREATE', stream, group, '0', 'ENTRIESREAD', dropped)
return 1
