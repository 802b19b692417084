-- Builds a tenant's full-text index from its rows, a session at a time (after
-- search.lua). KEYS[1] is a key of the tenant (for a cluster's routing); ARGV[1] is the
-- step, ARGV[2] the tenant's key base tb, ARGV[3] its session index key.
--
-- 'begin': an index in state 'off' whose keys are all gone (drop.lua), or none, goes
--   to 'building'. Returns the state after it ('dirty': 'off' with keys left).
-- 'session' ARGV[4] base, ARGV[5] session id, ARGV[6] the session's change count
--   (tb:x:c) read before its rows ('' for none), then 5 fields per part with a
--   document, read from the rows: message id, part id, length, words, values. Writes
--   them and marks the session built (tb:x:b), unless it changed since it was read
--   ('changed': read it again), the index is no longer being built ('stopped'), or it
--   was built already.
-- 'finish': when every session of the tenant is built, the index is 'ready' and the
--   build's marks go ('missing' when a session is not built).
local step, tb, skey = ARGV[1], ARGV[2], ARGV[3]
local state = redis.call('HGET', tb .. ':x:s', 'state') or ''

if step == 'begin' then
  if state == 'ready' or state == 'building' then return state end
  if state == 'off' and redis.call('EXISTS', tb .. ':x:d', tb .. ':x:n', tb .. ':x:b',
      tb .. ':x:c') > 0 then
    return 'dirty'
  end
  redis.call('DEL', tb .. ':x:s')
  redis.call('HSET', tb .. ':x:s', 'state', 'building', 'docs', '0', 'len', '0')
  return 'building'
end

if state ~= 'building' then return 'stopped' end

if step == 'session' then
  local base, sid, count = ARGV[4], ARGV[5], ARGV[6]
  if redis.call('SISMEMBER', tb .. ':x:b', sid) == 1 then return 'ok' end
  if (redis.call('HGET', tb .. ':x:c', sid) or '') ~= count then return 'changed' end
  for i = 7, #ARGV, 5 do
    x_put(tb, base, sid, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
  end
  redis.call('SADD', tb .. ':x:b', sid)
  return 'ok'
end

-- 'finish'
local sessions = redis.call('ZRANGE', skey, 0, -1)
for i = 1, #sessions, 1000 do
  local chunk = {}
  for k = i, math.min(i + 999, #sessions) do chunk[#chunk + 1] = sessions[k] end
  for _, built in ipairs(redis.call('SMISMEMBER', tb .. ':x:b', unpack(chunk))) do
    if built == 0 then return 'missing' end
  end
end
redis.call('HSET', tb .. ':x:s', 'state', 'ready')
redis.call('DEL', tb .. ':x:b', tb .. ':x:c')
return 'ready'
