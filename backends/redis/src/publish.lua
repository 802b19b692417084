-- Publishes a batch of events, atomically. ARGV[1] is the streams' MAXLEN, ARGV[2] is
-- '1' when this batch was sent before and the answer was lost (a retry after a broken
-- connection), ARGV[3] the opt-in MAXLEN of work streams ('0': none), ARGV[4] '1' when
-- the tenant stream is the work stream (one shard); then 5 fields per event: session
-- stream key, tenant stream key, work stream key ('' for none), seq, JSON. Each event
-- goes to its session stream as entry `seq-0` and, only if that worked, to the tenant
-- stream and its work stream. An entry whose id is taken fails and is reported,
-- unless this is a retry and the entry there is this very event: the first attempt
-- wrote the batch (a script runs whole or not at all), so nothing is written twice.
-- Returns the failures as strings. KEYS[1] is the tenant stream of the batch (every
-- event of a batch is of one tenant on a Redis Cluster), declared for routing.
--
-- Trimming: session streams and tenant streams keep about MAXLEN entries. A work
-- stream with a consumer group is not trimmed here (the projector workers trim it below
-- what every group acknowledged) unless the opt-in bound is set; a work stream without
-- a group (no worker has started on it yet) keeps about MAXLEN entries.
local maxlen, retry = tonumber(ARGV[1]), ARGV[2] == '1'
local work_maxlen, tenant_is_work = tonumber(ARGV[3]), ARGV[4] == '1'
local failed = {}
-- Streams written by this batch: key -> entries to keep at least when trimmed by the
-- opt-in bound (0 for work-only streams), or false for a stream no worker consumes.
local written = {}
for i = 5, #ARGV, 5 do
  local skey, tkey, wkey, seq, json = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local id = seq .. '-0'
  local ok = redis.pcall('XADD', skey, 'MAXLEN', '~', maxlen, id, 'seq', seq, 'e', json)
  if type(ok) == 'table' and ok.err then
    local done = false
    if retry then
      local there = redis.call('XRANGE', skey, id, id)
      if #there == 1 then
        local fields = there[1][2]
        for j = 1, #fields, 2 do
          if fields[j] == 'e' and fields[j + 1] == json then done = true end
        end
      end
    end
    if not done then table.insert(failed, 'seq ' .. seq .. ': ' .. ok.err) end
  else
    redis.call('XADD', tkey, '*', 'seq', seq, 'e', json)
    if tenant_is_work then written[tkey] = maxlen else written[tkey] = false end
    if wkey ~= '' then
      redis.call('XADD', wkey, '*', 'seq', seq, 'e', json)
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
