-- Records dead letters, acknowledges entries, then trims the work stream below what
-- every consumer group has acknowledged, in one step.
-- KEYS[1]: the work stream; KEYS[2]: the tenant's dead-letter stream.
-- ARGV[1]: the group; ARGV[2]: entries the stream keeps whatever the groups
-- acknowledged (its `maxlen` retention when it is also the tenant stream subscribers
-- read, else 0); ARGV[3]: n, the number of entry ids; ARGV[4 .. 3+n]: the ids; then
-- each dead letter as a field count c followed by c field/value pairs.
-- Returns {acked, trimmed}.
local stream, dead, group = KEYS[1], KEYS[2], ARGV[1]
local keep, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local i = 4 + n
while i <= #ARGV do
  local c = tonumber(ARGV[i])
  redis.call('XADD', dead, '*', unpack(ARGV, i + 1, i + 2 * c))
  i = i + 1 + 2 * c
end
local acked = 0
for j = 4, 3 + n, 500 do
  acked = acked + redis.call('XACK', stream, group, unpack(ARGV, j, math.min(j + 499, 3 + n)))
end

-- Trim. The floor is the lowest id some group has not acknowledged: a group's first
-- pending entry, or its last delivered one when nothing is pending (kept: one entry
-- more than needed). Entries below the floor go, but no more than leave `keep`
-- entries, and at most `cap` per call (the rest in later calls).
local cap = 1000
local excess = redis.call('XLEN', stream) - keep
if excess <= 0 then return {acked, 0} end
local floor = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local low
  if field(g, 'pending') > 0 then
    low = redis.call('XPENDING', stream, field(g, 'name'))[2]
  else
    low = field(g, 'last-delivered-id')
  end
  if floor == nil or below(low, floor) then floor = low end
end
if floor == nil or floor == '0-0' then return {acked, 0} end
local limit = math.min(excess, cap)
local old = redis.call('XRANGE', stream, '-', '(' .. floor, 'COUNT', limit)
if #old == 0 then return {acked, 0} end
-- Fewer than `limit` below the floor: all of them may go. Otherwise the `limit`-th
-- stays (and everything after it).
local cut = floor
if #old == limit then cut = old[limit][1] end
return {acked, redis.call('XTRIM', stream, 'MINID', '~', cut)}
