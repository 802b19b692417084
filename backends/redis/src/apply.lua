-- Applies one batch of sync events atomically. ARGV[1] is 'apply', or 'check' to
-- validate only (pass 1) and write nothing; ARGV[2] is '1' when the writer keeps the
-- full-text index (search=on), else '0'; then ops of 13 fields each:
-- op, seq, base, sessions_key, session_id, message_id, part_id, value, open, epoch,
-- and for a part upsert its document (search.lua): length in words ('' when the part
-- has no document, '-' when the writer did not read it: search=off), words, values.
-- KEYS[1] is one key of the batch's tenant, declared so that a Redis Cluster routes
-- the script to the node of the tenant's slot (every key of a tenant shares it).
-- Pass 0 checks fencing (forge_core::fence::check) and returns
-- {'fenced', op index from 0, epoch, holder, expires} (the session's current record,
-- all '' when there is none) before any write. Pass 1 validates the whole batch
-- against the data plus an overlay of what earlier ops of the batch create and
-- remove, and returns {'notfound', what, id} before any write. Pass 2 writes. Redis
-- runs a script atomically, so the batch is all or nothing, and a claim (a script
-- too) runs entirely before or after it.
local W, H = 13, 2
local n = (#ARGV - H) / W

-- Pass 0: every op's epoch (a decimal, or '' for an unfenced writer) must be its
-- session's current one, read from the session's fence record `base:fence` (see
-- Keys::fence) once per session. Epochs compare as numbers (tonumber), never as
-- strings; the caller sends '-1' for an epoch no record can hold. Reads only.
local fences = {}
for i = 0, n - 1 do
  local o = H + i * W
  local base, epoch = ARGV[o + 3], ARGV[o + 10]
  local rec = fences[base]
  if rec == nil then
    rec = redis.call('HMGET', base .. ':fence', 'epoch', 'holder', 'expires')
    fences[base] = rec
  end
  local ok
  if epoch == '' then
    ok = not rec[1]
  else
    ok = rec[1] and tonumber(rec[1]) == tonumber(epoch)
  end
  if not ok then
    return {'fenced', tostring(i), rec[1] or '', rec[2] or '', rec[3] or ''}
  end
end

-- seq strings are decimal u64 without leading zeros: compare by length, then bytes
-- (Lua numbers are doubles and lose precision above 2^53).
local function gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

local sess, wiped, msgs = {}, {}, {}
local function sess_exists(base)
  local v = sess[base]
  if v ~= nil then return v end
  return redis.call('EXISTS', base .. ':info') == 1
end
local function msg_exists(base, mid)
  local t = msgs[base]
  if t ~= nil and t[mid] ~= nil then return t[mid] end
  if wiped[base] then return false end
  return redis.call('HEXISTS', base .. ':m', mid) == 1
end
local function set_msg(base, mid, v)
  local t = msgs[base]
  if t == nil then t = {}; msgs[base] = t end
  t[mid] = v
end

for i = 0, n - 1 do
  local o = H + i * W
  local op, base, mid = ARGV[o + 1], ARGV[o + 3], ARGV[o + 6]
  if op == 'su' then
    sess[base] = true
  elseif op == 'sd' then
    sess[base] = false; wiped[base] = true; msgs[base] = {}
  elseif op == 'mu' then
    if not sess_exists(base) then return {'notfound', 'session', ARGV[o + 5]} end
    set_msg(base, mid, true)
  elseif op == 'mr' then
    set_msg(base, mid, false)
  elseif op == 'pu' then
    if not msg_exists(base, mid) then return {'notfound', 'message', mid} end
  end
end

if ARGV[1] == 'check' then return {'ok'} end

-- base:pi maps each part id of the session to the message holding it (a part id is
-- unique within its session). Sessions written before it existed lack the 'pi' mark
-- on their info hash; the first part upsert builds their index.
local function ensure_index(base)
  local info = base .. ':info'
  if redis.call('HGET', info, 'pi') == '1' then return end
  for _, m in ipairs(redis.call('ZRANGE', base .. ':mi', 0, -1)) do
    for _, pid in ipairs(redis.call('HKEYS', base .. ':p:' .. hex(m))) do
      redis.call('HSET', base .. ':pi', pid, m)
    end
  end
  redis.call('HSET', info, 'pi', '1')
end

local function unindex(base, pid, mid)
  if redis.call('HGET', base .. ':pi', pid) == mid then
    redis.call('HDEL', base .. ':pi', pid)
  end
end

-- The full-text index of each tenant is kept by what its state (tb:x:s) says, not by
-- the writer's option, so every writer keeps an index once it exists: 'ready', or
-- 'building' for the sessions already built (tb:x:b). A change to a session not built
-- yet is counted instead (tb:x:c), so the builder knows its read went stale.
local xstate = {}
local function x_state(tb)
  local s = xstate[tb]
  if s == nil then
    s = redis.call('HGET', tb .. ':x:s', 'state') or ''
    xstate[tb] = s
  end
  return s
end

-- Whether the index of session sid is kept by a change to its documents (counting
-- the change when the session is not built yet).
local function x_keep(tb, sid)
  local s = x_state(tb)
  if s == 'ready' then return true end
  if s ~= 'building' then return false end
  if redis.call('SISMEMBER', tb .. ':x:b', sid) == 1 then return true end
  redis.call('HINCRBY', tb .. ':x:c', sid, 1)
  return false
end

local function del_message(base, mid, tb, keep)
  local hm = hex(mid)
  local pk = base .. ':p:' .. hm
  for _, pid in ipairs(redis.call('HKEYS', pk)) do
    redis.call('SREM', base .. ':op', hm .. ':' .. pid)
    unindex(base, pid, mid)
    if keep then x_del(tb, base, pid, mid) end
  end
  redis.call('DEL', pk)
  redis.call('HDEL', base .. ':m', mid)
  redis.call('ZREM', base .. ':mi', mid)
  redis.call('SREM', base .. ':om', mid)
end

for i = 0, n - 1 do
  local o = H + i * W
  local op, seq, base, skey = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4]
  local sid, mid, pid, val, open = ARGV[o + 5], ARGV[o + 6], ARGV[o + 7], ARGV[o + 8], ARGV[o + 9]
  local info = base .. ':info'
  local tb = string.sub(skey, 1, -10) -- skey is tb .. ':sessions'
  if op == 'su' then
    if redis.call('EXISTS', info) == 0 then
      -- A new session has no document: it is built. A tenant's first session
      -- starts its index when the writer keeps one.
      local s = x_state(tb)
      if s == 'building' then
        redis.call('SADD', tb .. ':x:b', sid)
      elseif s == '' and ARGV[2] == '1' and redis.call('ZCARD', skey) == 0 then
        redis.call('HSET', tb .. ':x:s', 'state', 'ready', 'docs', '0', 'len', '0')
        xstate[tb] = 'ready'
      end
      redis.call('HSET', info, 'v', val, 'seq', '0', 'pi', '1')
      redis.call('ZADD', skey, 0, sid)
    else
      redis.call('HSET', info, 'v', val)
    end
  elseif op == 'sd' then
    if redis.call('EXISTS', info) == 1 then
      if x_keep(tb, sid) then
        for _, p in ipairs(redis.call('HKEYS', base .. ':x')) do x_del(tb, base, p, nil) end
      end
      for _, m in ipairs(redis.call('ZRANGE', base .. ':mi', 0, -1)) do
        redis.call('DEL', base .. ':p:' .. hex(m))
      end
      redis.call('DEL', info, base .. ':m', base .. ':mi', base .. ':om', base .. ':op',
        base .. ':pi', base .. ':x')
      redis.call('ZREM', skey, sid)
    end
  elseif op == 'mu' then
    redis.call('HSET', base .. ':m', mid, val)
    redis.call('ZADD', base .. ':mi', 0, mid)
    if open == '1' then
      redis.call('SADD', base .. ':om', mid)
    else
      redis.call('SREM', base .. ':om', mid)
    end
  elseif op == 'mr' then
    if redis.call('HEXISTS', base .. ':m', mid) == 1 then
      del_message(base, mid, tb, x_keep(tb, sid))
    end
  elseif op == 'pu' then
    ensure_index(base)
    local at = redis.call('HGET', base .. ':pi', pid)
    if at and at ~= mid then
      -- Upserted under another message of its session: the part moves.
      redis.call('HDEL', base .. ':p:' .. hex(at), pid)
      redis.call('SREM', base .. ':op', hex(at) .. ':' .. pid)
    end
    redis.call('HSET', base .. ':pi', pid, mid)
    redis.call('HSET', base .. ':p:' .. hex(mid), pid, val)
    if x_keep(tb, sid) then
      local len = ARGV[o + 11]
      if len == '-' then
        -- Written without its words (search=off): the index can no longer be kept;
        -- it is dropped and built again by the next store that keeps one.
        redis.call('HSET', tb .. ':x:s', 'state', 'off')
        xstate[tb] = 'off'
      elseif len == '' then
        x_del(tb, base, pid, nil)
      else
        x_put(tb, base, sid, mid, pid, len, ARGV[o + 12], ARGV[o + 13])
      end
    end
    if open == '1' then
      redis.call('SADD', base .. ':op', hex(mid) .. ':' .. pid)
    else
      redis.call('SREM', base .. ':op', hex(mid) .. ':' .. pid)
    end
  elseif op == 'pr' then
    if redis.call('HDEL', base .. ':p:' .. hex(mid), pid) == 1 then
      unindex(base, pid, mid)
      if x_keep(tb, sid) then x_del(tb, base, pid, mid) end
    end
    redis.call('SREM', base .. ':op', hex(mid) .. ':' .. pid)
  end
  if redis.call('EXISTS', info) == 1 then
    local cur = redis.call('HGET', info, 'seq') or '0'
    if gt(seq, cur) then redis.call('HSET', info, 'seq', seq) end
  end
end
return {'ok'}
