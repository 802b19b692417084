-- Publishes a batch of events, atomically. ARGV[1] is the streams' MAXLEN, ARGV[2] is
-- '1' when this batch was sent before and the answer was lost (a retry after a broken
-- connection), ARGV[3] the opt-in MAXLEN of work streams ('0': none), ARGV[4] '1' when
-- the tenant stream is the work stream (one shard), ARGV[5] the number N of session
-- stream entries. Then N times 5 fields, one session stream entry each: its stream
-- key, the first and the last seq it holds, and its one field and value: `d` and a
-- compact delta or run of deltas, or `e` and the envelope's JSON. Then 6 fields per
-- tenant stream entry, in publishing order: the index (from 1) of the session stream
-- entry holding its events, the tenant stream key, the work stream key ('' for none),
-- the session id, the last seq it stands for and how many (consecutive) seqs.
--
-- A session stream entry is written as `LAST-0`. It fails, and is reported, when its
-- first seq is not after the stream's last entry (for one event, XADD itself refuses),
-- unless this is a retry and the entry there is this very one: the first attempt wrote
-- the batch (a script runs whole or not at all), so nothing is written twice. A tenant
-- stream entry is written only if its session stream entry was: a delta as a reference
-- (`r` = its session, `seq`, and `n` when it stands for more than one), any other event
-- as `seq` and `e`; a sync event also goes to its work stream as `seq` and `e`. Returns
-- the failures as strings. KEYS[1] is the tenant stream of the batch (every event of a
-- batch is of one tenant on a Redis Cluster), declared for routing.
--
-- Trimming: session streams and tenant streams keep about MAXLEN entries. A work
-- stream with a consumer group is not trimmed here (the projector workers trim it below
-- what every group acknowledged) unless the opt-in bound is set; a work stream without
-- a group (no worker has started on it yet) keeps about MAXLEN entries.
local maxlen, retry = tonumber(ARGV[1]), ARGV[2] == '1'
local work_maxlen, tenant_is_work = tonumber(ARGV[3]), ARGV[4] == '1'
local n = tonumber(ARGV[5])
local failed = {}
-- The seq of each session stream's last entry, read once a run needs it.
local top = {}
local function last_seq(skey)
  if top[skey] == nil then
    local last = redis.call('XREVRANGE', skey, '+', '-', 'COUNT', 1)
    top[skey] = 0
    if #last == 1 then top[skey] = tonumber(string.match(last[1][1], '^(%d+)-')) end
  end
  return top[skey]
end
local written_entry, fields, values = {}, {}, {}
local i = 6
for k = 1, n do
  local skey, first, last = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local field, value = ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  fields[k], values[k] = field, value
  local id = last .. '-0'
  local ok
  if first < tonumber(last) and first <= last_seq(skey) then
    ok = { err = 'ERR seqs ' .. first .. '-' .. last .. ' overlap the stream, which ends at ' .. last_seq(skey) }
  else
    ok = redis.pcall('XADD', skey, 'MAXLEN', '~', maxlen, id, field, value)
  end
  if type(ok) == 'table' and ok.err then
    local done = false
    if retry then
      local there = redis.call('XRANGE', skey, id, id)
      if #there == 1 then
        local f = there[1][2]
        for j = 1, #f, 2 do
          if f[j] == field and f[j + 1] == value then done = true end
        end
      end
    end
    if not done then table.insert(failed, 'seq ' .. last .. ': ' .. ok.err) end
  else
    written_entry[k] = true
    top[skey] = tonumber(last)
  end
end
-- Streams written by this batch: key -> entries to keep at least when trimmed by the
-- opt-in bound (0 for work-only streams), or false for a stream no worker consumes.
local written = {}
while i <= #ARGV do
  local k, tkey, wkey = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  local session, seq, count = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  i = i + 6
  if written_entry[k] then
    if fields[k] == 'd' then
      if count == '1' then
        redis.call('XADD', tkey, '*', 'r', session, 'seq', seq)
      else
        redis.call('XADD', tkey, '*', 'r', session, 'seq', seq, 'n', count)
      end
    else
      redis.call('XADD', tkey, '*', 'seq', seq, 'e', values[k])
    end
    if tenant_is_work then written[tkey] = maxlen else written[tkey] = false end
    if wkey ~= '' then
      redis.call('XADD', wkey, '*', 'seq', seq, 'e', values[k])
      written[wkey] = 0
    end
  end
end
for key, keep in pairs(written) do
  if keep == false or #redis.call('XINFO', 'GROUPS', key) == 0 then
    redis.call('XTRIM', key, 'MAXLEN', '~', maxlen)
  elseif work_maxlen > 0 then
    redis.call('XTRIM', key, 'MAXLEN', '~', math.max(keep, work_maxlen))
  end
end
return failed
