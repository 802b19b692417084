-- Publishes a batch of events, atomically. ARGV[1] is the streams' MAXLEN, ARGV[2] is
-- '1' when this batch was sent before and the answer was lost (a retry after a broken
-- connection); then 5 fields per event: session stream key, tenant stream key, work
-- stream key ('' when the tenant stream is the work stream), seq, JSON. Each event
-- goes to its session stream as entry `seq-0` and, only if that worked, to the tenant
-- stream and its work stream. An entry whose id is taken fails and is reported,
-- unless this is a retry and the entry there is this very event: the first attempt
-- wrote the batch (a script runs whole or not at all), so nothing is written twice.
-- Returns the failures as strings. KEYS[1] is the tenant stream of the batch (every
-- event of a batch is of one tenant on a Redis Cluster), declared for routing.
local maxlen, retry = ARGV[1], ARGV[2] == '1'
local failed = {}
for i = 3, #ARGV, 5 do
  local skey, tkey, wkey, seq, json = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local id = seq .. '-0'
  local ok = redis.pcall('XADD', skey, 'MAXLEN', '~', maxlen, id, 'seq', seq, 'e', json)
  if type(ok) == 'table' and ok.err then
    local written = false
    if retry then
      local there = redis.call('XRANGE', skey, id, id)
      if #there == 1 then
        local fields = there[1][2]
        for j = 1, #fields, 2 do
          if fields[j] == 'e' and fields[j + 1] == json then written = true end
        end
      end
    end
    if not written then table.insert(failed, 'seq ' .. seq .. ': ' .. ok.err) end
  else
    redis.call('XADD', tkey, 'MAXLEN', '~', maxlen, '*', 'seq', seq, 'e', json)
    if wkey ~= '' then
      redis.call('XADD', wkey, 'MAXLEN', '~', maxlen, '*', 'seq', seq, 'e', json)
    end
  end
end
return failed
