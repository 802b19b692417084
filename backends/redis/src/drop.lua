-- Drops a tenant's full-text index (after search.lua). KEYS[1] is a key of the tenant;
-- ARGV[1] the step, ARGV[2] the tenant's key base tb.
--
-- 'off': the index stops being kept (state 'off'; writers leave it alone from then
--   on). Returns 'none' when the tenant has no index state at all.
-- 'chunk': removes up to ARGV[3] documents with every posting of their words (whole
--   word keys) and their sessions' part maps; when none is left, the index's other
--   keys, leaving the state 'off' alone. Returns 'more' or 'done', or 'notoff' when the
--   state is not 'off' (a builder took over).
local step, tb = ARGV[1], ARGV[2]
local state = redis.call('HGET', tb .. ':x:s', 'state')

if step == 'off' then
  if not state then return 'none' end
  redis.call('HSET', tb .. ':x:s', 'state', 'off')
  return 'off'
end

if state ~= 'off' then return 'notoff' end
local ids = redis.call('HRANDFIELD', tb .. ':x:d', tonumber(ARGV[3]))
if #ids > 0 then
  local gone = {}
  for _, id in ipairs(ids) do
    local sid, _, _, words = x_parse(redis.call('HGET', tb .. ':x:d', id))
    for w in string.gmatch(words, '[^ ]+') do
      if not gone[w] then
        gone[w] = true
        redis.call('UNLINK', tb .. ':x:w:' .. w)
      end
    end
    local sx = tb .. ':s:' .. hex(sid) .. ':x'
    if not gone[sx] then
      gone[sx] = true
      redis.call('UNLINK', sx)
    end
    redis.call('HDEL', tb .. ':x:d', id)
  end
  return 'more'
end
redis.call('UNLINK', tb .. ':x:n', tb .. ':x:b', tb .. ':x:c')
redis.call('DEL', tb .. ':x:s')
redis.call('HSET', tb .. ':x:s', 'state', 'off')
return 'done'
