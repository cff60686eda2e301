-- Shared by every fleet script (prepended to each). ARGV[1] is the key prefix.
-- Errors about a key are raised as "AIMDKEY <key> <what>", which the Python
-- side turns into a FleetStoreError naming the key.
local P = ARGV[1]
local INF = math.huge

local function fail(key, what)
  error({err = 'AIMDKEY ' .. key .. ' ' .. what})
end

-- redis.call, with a WRONGTYPE or any other error reported against the key.
local function call(cmd, key, ...)
  local reply = redis.pcall(cmd, key, ...)
  if type(reply) == 'table' and reply.err then
    fail(key, reply.err)
  end
  return reply
end

local function fmt(x)
  return string.format('%.17g', x)
end

local function num(key, field, value, default)
  if value == false or value == nil then
    return default
  end
  local n = tonumber(value)
  if n == nil then
    fail(key, 'field ' .. field .. ' is not a number: ' .. tostring(value))
  end
  return n
end

local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function check_meta()
  local key = P .. ':meta'
  local format = call('HGET', key, 'format')
  if format ~= '1' then
    fail(key, 'is missing or not a scrapy-aimd fleet of format 1 (the fleet state was deleted or replaced)')
  end
end

local function host_key(host)
  return P .. ':h:' .. host
end

local function queue_key(host)
  return P .. ':q:' .. host
end

-- When the host may next start: the controller's ready_at, from the fields
-- that the Python side derives from it (gap, limit, pause) and the fleet's
-- own in-flight count and last start.
local function ready_at(host)
  local key = host_key(host)
  local f = call('HMGET', key, 'fl', 'lim', 'gap', 'pause', 'last', 'ut')
  local in_flight = num(key, 'fl', f[1], 0)
  local limit = num(key, 'lim', f[2], 1)
  if in_flight >= limit then
    return INF
  end
  local gap = num(key, 'gap', f[3], 0)
  local pause = num(key, 'pause', f[4], -INF)
  local last = num(key, 'last', f[5], -INF)
  local at = math.max(last + gap, pause)
  -- The latest claim of a host with a gap, not yet reported sent (sent.lua):
  -- the gap counts from its send, so the next start waits for the report, or
  -- for one more gap if none comes (a worker that died, or never sent it).
  local unsent = num(key, 'ut', f[6], nil)
  if unsent ~= nil and gap > 0 then
    at = math.max(at, unsent + 2 * gap)
  end
  return at
end

-- A claim of a host with a gap waits for its send to be reported (ready_at).
local function await_send(host, id, now)
  local key = host_key(host)
  if num(key, 'gap', call('HGET', key, 'gap'), 0) > 0 then
    call('HSET', key, 'us', id, 'ut', fmt(now))
  end
end

-- The lease's send was reported, or it will never be: the next start need not
-- wait for it.
local function settle_send(host, id)
  local key = host_key(host)
  if call('HGET', key, 'us') == id then
    call('HDEL', key, 'us', 'ut')
  end
end

-- File the host in the hosts' sorted set by when it may start, or take it
-- out when nothing is queued for it.
local function rescore(host)
  local hosts = P .. ':hosts'
  if call('ZCARD', queue_key(host)) == 0 then
    call('ZREM', hosts, host)
  else
    call('ZADD', hosts, fmt(ready_at(host)), host)
  end
end

-- The host's log of starts and cancels not yet folded into its stored state:
-- entries '<kind> <lease id> <time>' (kind s: claimed, c: its place freed with
-- no feedback). A feedback replays them on the stored state, in order, so
-- that every worker's starts reach the controller (docs/fleet.rst).
local function log_key(host)
  return P .. ':e:' .. host
end

local function log_event(host, kind, id, now)
  call('RPUSH', log_key(host), kind .. ' ' .. id .. ' ' .. fmt(now))
end

local function add_in_flight(host, delta)
  local key = host_key(host)
  local value = call('HINCRBY', key, 'fl', delta)
  if value < 0 then
    call('HSET', key, 'fl', 0)
  end
end

-- A lease deleted: if nothing is queued or leased any more, the fleet is
-- idle from now.
local function note_idle(now)
  local queued = num(P .. ':n', 'value', call('GET', P .. ':n'), 0)
  if queued <= 0 and call('ZCARD', P .. ':leases') == 0 then
    call('SET', P .. ':idle_since', fmt(now))
  end
end

-- A lease's request back to its host's queue, its place freed; false if the
-- lease is gone (done, or put back already).
local function requeue(id)
  local lease = P .. ':l:' .. id
  local l = call('HMGET', lease, 'h', 's', 'm', 'r')
  call('ZREM', P .. ':leases', id)
  call('DEL', lease)
  if not l[1] then
    return false
  end
  settle_send(l[1], id)
  if not (l[2] and l[3]) then
    -- A hold (hold.lua): nothing to queue again, its place is freed.
    if not l[4] then
      add_in_flight(l[1], -1)
      log_event(l[1], 'c', id, server_now())
      rescore(l[1])
    end
    return false
  end
  call('ZADD', queue_key(l[1]), l[2], l[3])
  call('INCR', P .. ':n')
  if not l[4] then
    add_in_flight(l[1], -1)
    log_event(l[1], 'c', id, server_now())
  end
  rescore(l[1])
  return true
end

-- Expired leases back to their hosts' queues.
local function reap(now, limit)
  local ids = call('ZRANGEBYSCORE', P .. ':leases', '-inf', fmt(now), 'LIMIT', 0, limit)
  local requeued = 0
  for _, id in ipairs(ids) do
    if requeue(id) then
      requeued = requeued + 1
    end
  end
  if requeued > 0 then
    call('INCRBY', P .. ':reaped', requeued)
  end
  return requeued
end

-- robots.txt, fetched once per fleet: P:r:<origin> holds the answer a worker
-- fetched (robots_put.lua), and the lock P:rl:<origin> the id of the worker
-- fetching it.
local function robots_key(origin, lock)
  return P .. (lock and ':rl:' or ':r:') .. origin
end

-- The origin's stored answer, appended to reply: status, body, truncated, gave
-- up, age (seconds since it was fetched); false when none is stored.
local function add_robots_answer(reply, origin, now)
  local key = robots_key(origin)
  local a = call('HMGET', key, 's', 'b', 'x', 'u', 't')
  if not a[5] then
    return false
  end
  local age = math.max(0, now - num(key, 't', a[5], now))
  for _, value in ipairs({a[1] or '', a[2] or '', a[3] or '0', a[4] or '0', fmt(age)}) do
    reply[#reply + 1] = value
  end
  return true
end
