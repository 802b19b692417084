-- The full-text index's functions, put before the body of every script that writes or
-- reads the index (apply, build, drop, fetch). `tb` is a tenant's key base (`P:t:{T}`),
-- `base` a session's (`tb:s:hex(S)`). A document is one part's text, numbered per
-- tenant (`tb:x:n`); `base:x[part]` = its number ':' its length in words; its record
-- `tb:x:d[doc]` = location '\n' words '\n' values (space-separated, in the same order;
-- a word holds no space or newline); each of its words a posting `tb:x:w:WORD[doc]` =
-- value, the word's count plus the document's length times 2^20 (computed by the
-- caller; opaque here). `tb:x:s` holds the state (`building`, `ready`, `off`), `docs`
-- (the number of documents) and `len` (the sum of their lengths).

local function hex(s)
  local n = #s
  if n <= 200 then return string.format(string.rep('%02x', n), string.byte(s, 1, n)) end
  return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end))
end

-- A document's location: session, message and part ids, each as `#id:id`.
local function x_loc(sid, mid, pid)
  return #sid .. ':' .. sid .. #mid .. ':' .. mid .. #pid .. ':' .. pid
end

-- A record's session, message and part ids, words and values.
local function x_parse(rec)
  local ids, at = {}, 1
  for k = 1, 3 do
    local c = string.find(rec, ':', at, true)
    local n = tonumber(string.sub(rec, at, c - 1))
    ids[k] = string.sub(rec, c + 1, c + n)
    at = c + n + 1
  end
  -- rec[at] is the newline after the location.
  local nl = string.find(rec, '\n', at + 1, true)
  return ids[1], ids[2], ids[3], string.sub(rec, at + 1, nl - 1), string.sub(rec, nl + 1)
end

-- A `base:x` value's document number and length.
local function x_doc(v)
  local c = string.find(v, ':', 1, true)
  return string.sub(v, 1, c - 1), string.sub(v, c + 1)
end

-- Indexes part pid of session sid (at base) in message mid, replacing its previous
-- document: len is the new document's length in words, words and vals its distinct
-- words and their posting values. Postings whose value did not change are not
-- rewritten.
local function x_put(tb, base, sid, mid, pid, len, words, vals)
  local cur = redis.call('HGET', base .. ':x', pid)
  local old, oldrec, id, oldlen = {}, nil, nil, '0'
  if cur then
    id, oldlen = x_doc(cur)
    oldrec = redis.call('HGET', tb .. ':x:d', id)
    if oldrec then
      local _, _, _, ow, ov = x_parse(oldrec)
      local nextv = string.gmatch(ov, '[^ ]+')
      for w in string.gmatch(ow, '[^ ]+') do old[w] = nextv() end
    end
  else
    id = tostring(redis.call('INCR', tb .. ':x:n'))
    redis.call('HINCRBY', tb .. ':x:s', 'docs', 1)
  end
  local nextv = string.gmatch(vals, '[^ ]+')
  for w in string.gmatch(words, '[^ ]+') do
    local v = nextv()
    if old[w] ~= v then redis.call('HSET', tb .. ':x:w:' .. w, id, v) end
    old[w] = nil
  end
  for w in pairs(old) do redis.call('HDEL', tb .. ':x:w:' .. w, id) end
  local rec = x_loc(sid, mid, pid) .. '\n' .. words .. '\n' .. vals
  if rec ~= oldrec then redis.call('HSET', tb .. ':x:d', id, rec) end
  local doc = id .. ':' .. len
  if doc ~= cur then redis.call('HSET', base .. ':x', pid, doc) end
  local d = tonumber(len) - tonumber(oldlen)
  if d ~= 0 then redis.call('HINCRBY', tb .. ':x:s', 'len', d) end
end

-- Removes the document of part pid of the session at base, when its record names
-- message mid (whatever its message when mid is nil).
local function x_del(tb, base, pid, mid)
  local cur = redis.call('HGET', base .. ':x', pid)
  if not cur then return end
  local id, len = x_doc(cur)
  local rec = redis.call('HGET', tb .. ':x:d', id)
  if rec then
    local _, m, _, words = x_parse(rec)
    if mid and m ~= mid then return end
    for w in string.gmatch(words, '[^ ]+') do redis.call('HDEL', tb .. ':x:w:' .. w, id) end
  end
  if len ~= '0' then redis.call('HINCRBY', tb .. ':x:s', 'len', -tonumber(len)) end
  redis.call('HINCRBY', tb .. ':x:s', 'docs', -1)
  redis.call('HDEL', tb .. ':x:d', id)
  redis.call('HDEL', base .. ':x', pid)
end
