-- Helpers shared by the worker's scripts (prepended to each).

-- The value of `name` in a flat field/value reply (`XINFO`).
local function field(reply, name)
  for j = 1, #reply, 2 do
    if reply[j] == name then return reply[j + 1] end
  end
  return nil
end

-- Whether stream entry id `a` is below `b` (`ms-seq`, compared as numbers).
local function below(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end

-- The reply of `XINFO GROUPS` for group `name` of `stream`, or nil.
local function group_info(stream, name)
  if redis.call('EXISTS', stream) == 0 then return nil end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    if field(g, 'name') == name then return g end
  end
  return nil
end

