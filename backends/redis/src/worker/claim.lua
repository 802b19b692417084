-- One page of `XAUTOCLAIM`: takes over pending entries of group ARGV[1] on stream
-- KEYS[1] for consumer ARGV[2], from id ARGV[3], ARGV[4] at most. Redis drops from the
-- pending list the entries whose body was trimmed away; each of those is recorded in
-- the dead-letter stream KEYS[2] here, in the same step, so none goes unrecorded.
-- Returns {next start id, number claimed, {trimmed ids}}.
local stream, dead, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local r = redis.call('XAUTOCLAIM', stream, group, consumer, 0, ARGV[3], 'COUNT', ARGV[4], 'JUSTID')
for _, id in ipairs(r[3]) do
  redis.call('XADD', dead, '*',
    'reason', 'trimmed',
    'error', 'pending entry ' .. id .. ' of ' .. stream .. ' was trimmed before it was applied',
    'group', group, 'consumer', consumer, 'stream', stream, 'entry', id, 'count', 1)
end
return {r[1], #r[2], r[3]}
