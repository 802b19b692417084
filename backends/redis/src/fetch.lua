-- Reads what a search answer needs from a tenant's full-text index, consistently with
-- the rows (after search.lua). KEYS[1] is a key of the tenant; ARGV[1] is the tenant's
-- key base tb, ARGV[2] the mode, ARGV[3] the number of query words k, then the k
-- words, then document numbers. Per document, in order, an array:
-- 'loc': session, message and part ids; 'row': those, the part's row and the k posting
-- values. An empty array for a document that is gone, or ('row') whose part row is gone
-- or no longer holds every word.
local tb, mode, k = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = {}
for i = 4 + k, #ARGV do
  local id = ARGV[i]
  local rec = redis.call('HGET', tb .. ':x:d', id)
  local item = {}
  if rec then
    local sid, mid, pid = x_parse(rec)
    if mode == 'loc' then
      item = {sid, mid, pid}
    else
      local row = redis.call('HGET', tb .. ':s:' .. hex(sid) .. ':p:' .. hex(mid), pid)
      if row then
        item = {sid, mid, pid, row}
        for j = 1, k do
          local v = redis.call('HGET', tb .. ':x:w:' .. ARGV[3 + j], id)
          if not v then
            item = {}
            break
          end
          item[#item + 1] = v
        end
      end
    end
  end
  out[#out + 1] = item
end
return out
