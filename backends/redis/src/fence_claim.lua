-- Claims a session: reads its fence record, decides as forge_core::fence::decide does,
-- and writes the result, in one script (atomic against other claims and against apply,
-- which reads the record in its own script).
-- KEYS[1]: the session's fence record, a hash {epoch, holder, expires} (Keys::fence).
-- ARGV: mode ('free', 'takeover' or 'renew'), holder, now_ms, expires_ms (now_ms +
-- lease, saturated by the caller, stored as sent), the epoch to renew ('-1' when the
-- caller names one no record can hold; ignored unless renewing).
-- Returns {verdict, epoch, holder, expires}: 'ok' with the record written; else, with
-- the current record (all '' when there is none) and nothing written, 'held' (another
-- holder's lease runs), 'fenced' (the renewed epoch is not the current one),
-- 'exhausted' (no further epoch can be granted) or 'corrupt' (the record is unreadable).
-- Epochs are numbers: compared and incremented with tonumber, and granted only up to
-- 2^53, the last integer a Lua number (a double) holds exactly.
local MAX = 9007199254740992
local key = KEYS[1]
local mode, holder, now, expires, renew = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local cur = redis.call('HMGET', key, 'epoch', 'holder', 'expires')
local function refuse(verdict)
  return {verdict, cur[1] or '', cur[2] or '', cur[3] or ''}
end

local epoch
if cur[1] or cur[2] or cur[3] then
  epoch = tonumber(cur[1])
  if epoch == nil or not cur[2] or tonumber(cur[3]) == nil then return refuse('corrupt') end
end

local granted
if mode == 'renew' then
  if epoch == nil or epoch ~= tonumber(renew) then return refuse('fenced') end
  granted = epoch
elseif mode == 'free' or mode == 'takeover' then
  if mode == 'free' and epoch ~= nil and tonumber(cur[3]) > now and cur[2] ~= holder then
    return refuse('held')
  end
  local last = epoch or 0
  if last >= MAX then return refuse('exhausted') end
  granted = last + 1
else
  return redis.error_reply('fence claim: unknown mode ' .. tostring(mode))
end

-- '%.0f': tostring would write 1e+14 for large numbers.
local e = string.format('%.0f', granted)
redis.call('HSET', key, 'epoch', e, 'holder', holder, 'expires', expires)
return {'ok', e, holder, expires}
