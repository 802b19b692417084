-- Finds entries trimmed from work streams before group ARGV[1] received them, records
-- each such gap in the dead-letter stream and moves the group's read counter past it,
-- so a gap is recorded once. KEYS[1 .. n-1] are work streams, KEYS[n] the tenant's
-- dead-letter stream; ARGV[2] is the consumer asking.
--
-- Redis 7 counts every entry ever added to a stream (`entries-added`) and every entry
-- delivered to a group (`entries-read`, exact unless the group was moved by XGROUP
-- SETID without ENTRIESREAD or entries were deleted by XDEL: then Redis reports none and
-- nothing is checked). Trimming removes entries from the head only, so when the
-- group's last delivered id L is below the first retained entry, `entries-added` minus
-- `length` entries were added up to the gap's end; when L is the stream's last id (the
-- group has caught up), `entries-added` were. What exceeds `entries-read` was never
-- delivered. In between (L inside the retained entries, more after it) nothing is
-- counted: a gap the group has already read past is recorded once it has caught up.
-- Returns {missed, after, before} per work stream (missed 0: no gap found).
local dead, group, consumer = KEYS[#KEYS], ARGV[1], ARGV[2]
local out = {}
for k = 1, #KEYS - 1 do
  local stream = KEYS[k]
  local missed, after, before = 0, '', ''
  local g = group_info(stream, group)
  local read = g and field(g, 'entries-read')
  if read then
    local last = field(g, 'last-delivered-id')
    local info = redis.call('XINFO', 'STREAM', stream)
    local added, length = field(info, 'entries-added'), field(info, 'length')
    local head = field(info, 'first-entry')
    -- The entries ever added up to the gap's end, and where the gap lies.
    local upto = nil
    local caught_up = last == field(info, 'last-generated-id')
    if head and below(last, head[1]) then
      upto, after, before = added - length, last, head[1]
    elseif not head and not caught_up then
      upto, after, before = added, last, '+'
    elseif caught_up then
      -- The gap lies below `last`; where exactly is no longer known.
      upto, after, before = added, '-', last
    end
    if upto and upto > read then
      missed = upto - read
      redis.call('XADD', dead, '*',
        'reason', 'trimmed',
        'error', missed .. ' entries of ' .. stream .. ' were trimmed before group ' .. group
          .. ' received them (ids after ' .. after .. ' and before ' .. before .. ')',
        'group', group, 'consumer', consumer, 'stream', stream,
        'count', missed, 'after', after, 'before', before)
      redis.call('XGROUP', 'SETID', stream, group, last, 'ENTRIESREAD', upto)
    end
  end
  out[k] = {missed, after, before}
end
return out
