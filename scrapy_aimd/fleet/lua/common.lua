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
  if format ~= '2' then
    fail(key, 'is missing or not a scrapy-aimd fleet of format 2 (the fleet state was deleted or replaced)')
  end
end

local function host_key(host)
  return P .. ':h:' .. host
end

local function queue_key(host)
  return P .. ':q:' .. host
end

-- The gate: the controller's ready_at (scrapy_aimd/core/controller/gate.py),
-- a pure function of the limits (gap, limit, pause), the requests in flight
-- and the last start. Returns INF at the limit; -INF for "now" (no start and
-- no pause yet). tests/test_gate_lua.py keeps the two equal.
local function gate_ready_at(in_flight, limit, gap, pause, last)
  if in_flight >= limit then
    return INF
  end
  return math.max(last + gap, pause)
end

-- When the host may next start: the gate, from the fields that the Python side
-- derives from the controller (gap, limit, pause) and the fleet's own
-- in-flight count and last start.
local function ready_at(host)
  local key = host_key(host)
  local f = call('HMGET', key, 'fl', 'lim', 'gap', 'pause', 'last', 'ut')
  local in_flight = num(key, 'fl', f[1], 0)
  local limit = num(key, 'lim', f[2], 1)
  local gap = num(key, 'gap', f[3], 0)
  local pause = num(key, 'pause', f[4], -INF)
  local last = num(key, 'last', f[5], -INF)
  local at = gate_ready_at(in_flight, limit, gap, pause, last)
  if at == INF then
    return INF
  end
  -- The latest claim of a host with a gap, not yet reported sent (report_sent):
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

-- Hosts given up on fleet-wide (AIMD_HOST_GIVE_UP, giveup.lua): a set of names.
local function given_up(host)
  return call('SISMEMBER', P .. ':gaveup', host) == 1
end

-- File the host in the hosts' sorted set by when it may start, or take it
-- out when nothing is queued for it. A host given up on is filed first (-inf):
-- the next claim hands what came back to its queue to its worker to fail.
local function rescore(host)
  local hosts = P .. ':hosts'
  if call('ZCARD', queue_key(host)) == 0 then
    call('ZREM', hosts, host)
  elseif given_up(host) then
    call('ZADD', hosts, '-inf', host)
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

-- The queue of a host given up on, taken whole: its members (in queue order),
-- removed with the fleet's count of queued requests (P:n) and the hosts' index
-- kept right; the fleet is idle from now if nothing else is queued or leased.
-- The leases of the host's requests in flight stay (their places, their
-- in-flight count): their answers and their done free them as ever.
local function drain(host, now)
  local queue = queue_key(host)
  local members = call('ZRANGE', queue, 0, -1)
  if #members > 0 then
    call('DEL', queue)
    call('DECRBY', P .. ':n', #members)
  end
  call('ZREM', P .. ':hosts', host)
  note_idle(now)
  return members
end

-- Leases: P:l:<id> (a hash: host 'h', its worker 'w', ...), P:leases (ids by
-- expiry) and P:wl:<worker> (the worker's ids, so that reaping a dead worker
-- reads its own leases, not the fleet's).
local function worker_leases(worker)
  return P .. ':wl:' .. worker
end

local function add_lease(id, worker, expires)
  call('ZADD', P .. ':leases', fmt(expires), id)
  call('SADD', worker_leases(worker), id)
end

-- The lease's keys gone; worker: its 'w' (false for a lease without one).
local function drop_lease(id, worker)
  call('ZREM', P .. ':leases', id)
  call('DEL', P .. ':l:' .. id)
  if worker then
    call('SREM', worker_leases(worker), id)
  end
end

-- A lease's request back to its host's queue, its place freed; false if the
-- lease is gone (done, or put back already). Second: the host, if a cancel was
-- logged on it (the place had no feedback).
local function requeue(id)
  local lease = P .. ':l:' .. id
  local l = call('HMGET', lease, 'h', 's', 'm', 'r', 'w')
  num(lease, 's', l[2], nil) -- checked before anything is changed: a script's error undoes nothing
  drop_lease(id, l[5])
  if not l[1] then
    return false
  end
  settle_send(l[1], id)
  if not (l[2] and l[3]) then
    -- A hold (hold.lua): nothing to queue again, its place is freed; the fleet
    -- is idle from now if it was its last lease.
    local now = server_now()
    local cancelled = nil
    if not l[4] then
      add_in_flight(l[1], -1)
      log_event(l[1], 'c', id, now)
      rescore(l[1])
      cancelled = l[1]
    end
    note_idle(now)
    return false, cancelled
  end
  call('ZADD', queue_key(l[1]), l[2], l[3])
  call('INCR', P .. ':n')
  local cancelled = nil
  if not l[4] then
    add_in_flight(l[1], -1)
    log_event(l[1], 'c', id, server_now())
    cancelled = l[1]
  end
  rescore(l[1])
  return true, cancelled
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

-- Worker heartbeats: P:hb:<worker id> lives for a few seconds and is kept
-- alive by its worker (heartbeat.lua on a timer, and every call of claim.lua),
-- P:workers names every worker that may hold leases, and each lease names its
-- worker ('w'). A worker whose heartbeat expired is dead (or its reactor was
-- blocked that long): every lease it holds goes back at once, its requests to
-- their queues and their places freed, not after the lease's own expiry (the
-- download timeout and a margin), and so does any robots.txt lock it holds
-- (live_lock_owner). P:dead:<worker> marks a worker reaped while it may be
-- alive: its next heartbeat.lua tells it so, and it drops what it claimed
-- (kept a day at most: a killed worker never reads it).
local DEAD_MARK_SECONDS = 86400

local function beat(worker, ms)
  call('SET', P .. ':hb:' .. worker, '1', 'PX', ms)
  call('SADD', P .. ':workers', worker)
end

local function alive(worker)
  return call('EXISTS', P .. ':hb:' .. worker) == 1
end

-- Every lease of the worker back (its own list, P:wl:<worker>: a reap reads
-- no other worker's); returns how many requests were queued again.
local function requeue_worker(worker)
  local requeued = 0
  local own = worker_leases(worker)
  for _, id in ipairs(call('SMEMBERS', own)) do
    local l = call('HMGET', P .. ':l:' .. id, 'w', 'o')
    if l[1] == worker then
      if l[2] and call('GET', robots_key(l[2], true)) == l[1] then
        call('DEL', robots_key(l[2], true))
      end
      if requeue(id) then
        requeued = requeued + 1
      end
    end
  end
  call('DEL', own)
  return requeued
end

-- The leases of dead workers (any but ``worker``, the caller) back; returns how
-- many requests were queued again.
local function reap_dead(worker)
  local workers = P .. ':workers'
  local requeued = 0
  for _, other in ipairs(call('SMEMBERS', workers)) do
    if other ~= worker and not alive(other) then
      call('SREM', workers, other)
      call('SET', P .. ':dead:' .. other, '1', 'EX', DEAD_MARK_SECONDS)
      requeued = requeued + requeue_worker(other)
    end
  end
  if requeued > 0 then
    call('INCRBY', P .. ':reaped', requeued)
  end
  return requeued
end

-- Who holds the origin's robots.txt lock: its worker, or nil. A lock whose
-- worker's heartbeat expired goes now (its value names its worker): a lock
-- kept through a retry's backoff has no lease that reap_dead would find.
local function live_lock_owner(origin)
  local lock = robots_key(origin, true)
  local owner = call('GET', lock)
  if owner and not alive(owner) then
    call('DEL', lock)
    return nil
  end
  return owner
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

-- Appends the host's log (its entries not yet folded into its state) to reply.
local function add_log(reply, host)
  for _, entry in ipairs(call('LRANGE', log_key(host), 0, -1)) do
    reply[#reply + 1] = entry
  end
  return reply
end

-- The lease's send was reported (carried by a claim, claim.lua): the host's
-- gap counts from then, so that two workers' requests reach the host no closer
-- than the gap (a single process does the same with HostController.sent).
-- t: when it was sent (server time, as the worker reckons it). Returns 1 if
-- the lease still held its place.
local function report_sent(host, id, t)
  local l = call('HMGET', P .. ':l:' .. id, 'h', 'r')
  if l[1] ~= host or l[2] then
    return 0
  end
  local key = host_key(host)
  local last = num(key, 'last', call('HGET', key, 'last'), -INF)
  if t > last then
    call('HSET', key, 'last', fmt(t))
  end
  settle_send(host, id)
  rescore(host)
  return 1
end

-- The crawl is done with a request: its lease goes, and its place is freed if
-- it had no feedback (dropped or cancelled before download). Returns
-- forgotten, freed (0 or 1 each), and the lease's host.
local function forget_lease(id, now)
  local lease = P .. ':l:' .. id
  local l = call('HMGET', lease, 'h', 'r', 'w')
  if not l[1] then
    return 0, 0
  end
  local freed = 0
  settle_send(l[1], id)
  if not l[2] then
    add_in_flight(l[1], -1)
    log_event(l[1], 'c', id, now)
    freed = 1
  end
  drop_lease(id, l[3])
  rescore(l[1])
  return 1, freed, l[1]
end

-- A feedback: the host's new controller state, stored if its version did not
-- move and the worker replayed exactly the log entries up to the event
-- (check-and-set); those entries are dropped and the lease's place released in
-- the same step. f: a table of host, expected version, state, gap, limit,
-- pause, lease id ('' for none), '1' to forget the lease ('0' to keep it until
-- done), seconds the kept lease still holds, tickets, entries of the host's log
-- replayed, the last of them ('' for none), the event's time, and the turn asked
-- for ('' for none, else its seconds). writer: the storing worker's id, kept
-- with the state ('w'): a claim's reply leaves the state out for the worker that
-- stored it (it has it in hand).
-- The host's turn ('tw' its holder, 'tu' its end, on this server's clock): a
-- worker whose answer keeps losing its race asks for it, and is granted it with
-- the loss if no other worker holds it; until it stores (or the turn ends: a
-- killed worker never wedges the host) every other worker's feedback of the
-- host is told to wait, unstored, so that the holder's next try, computed on the
-- state this loss shows, finds it unmoved. Claims go on as ever: their starts
-- are logged after the answer's time.
-- Returns 1, new version, released, '', ''; 0 (lost), version, state, tickets,
-- the end of the turn granted ('' for none); or 2 (another worker's turn),
-- version, state, tickets, the end of that turn.
local function store_feedback(f, now, writer)
  local host = f[1]
  local key = host_key(host)
  local log = log_key(host)
  local v = call('HMGET', key, 'v', 'st', 'tk', 'tw', 'tu')
  local version = num(key, 'v', v[1], 0)
  local holder = v[4]
  local turn_end = num(key, 'tu', v[5], -INF)
  if holder and holder ~= writer and turn_end > now then
    return 2, fmt(version), v[2] or '', v[3] or '', fmt(turn_end)
  end
  local replayed = tonumber(f[11])
  local at = tonumber(f[13])
  local current = fmt(version) == f[2]
  if current and replayed > 0 then
    current = call('LINDEX', log, replayed - 1) == f[12]
  end
  if current then
    local next_entry = call('LINDEX', log, replayed)
    if next_entry then
      local t = tonumber(string.match(next_entry, ' ([^ ]+)$'))
      current = t ~= nil and t > at
    end
  end
  if not current then
    local granted = ''
    if f[14] ~= '' then
      granted = fmt(now + tonumber(f[14]))
      call('HSET', key, 'tw', writer, 'tu', granted)
    end
    return 0, fmt(version), v[2] or '', v[3] or '', granted
  end
  call('HSET', key, 'v', fmt(version + 1), 'st', f[3], 'gap', f[4], 'lim', f[5],
    'pause', f[6], 'tk', f[10], 'w', writer)
  if holder then
    call('HDEL', key, 'tw', 'tu')  -- its holder stored, or it ended
  end
  if replayed > 0 then
    call('LTRIM', log, replayed, -1)
  end
  local released = 0
  local id = f[7]
  if id ~= '' then
    local lease = P .. ':l:' .. id
    local l = call('HMGET', lease, 'h', 'r', 'w')
    if l[1] == host then
      released = 1
      settle_send(host, id)
      if not l[2] then
        add_in_flight(host, -1)
        call('HSET', lease, 'r', 1)
      end
      if f[8] == '1' then
        drop_lease(id, l[3])
        note_idle(now)
      else
        call('ZADD', P .. ':leases', fmt(now + tonumber(f[9])), id)
      end
    end
  end
  rescore(host)
  return 1, fmt(version + 1), released, '', ''
end

-- Values as one string: their lengths, comma-separated, a ';', then the values
-- one after the other ('' for none: Python's unpack_fields). A reply of many
-- short values costs the worker's client a fraction of as many elements, and
-- the lengths first let it cut them apart with a few calls, not one per value.
local function pack(values)
  local lengths, texts = {}, {}
  for i, v in ipairs(values) do
    local text = tostring(v)
    texts[i] = text
    lengths[i] = #text
  end
  if #texts == 0 then
    return ''
  end
  return table.concat(lengths, ',') .. ';' .. table.concat(texts)
end

-- Queues requests: from ARGV[first], count of 7 values each (host, score, body,
-- seen bucket ('' for none), seen member, the host's initial gap, limit).
-- Adds each request's key to the seen set if absent (or takes it anyway when
-- no bucket is given) and queues it, unless its host was given up on. Returns
-- a table of each one's arrival number (queued: the head of its member, in
-- hex), 0 (seen) or -1 (its host given up on: not queued, the worker fails it).
local function push_requests(first, count)
  local out = {}
  local queued, added = 0, 0
  local hosts = P .. ':hosts'
  for i = first, first + 7 * (count - 1), 7 do
    local host, score, body, bucket, member = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
    local new = 1
    if bucket ~= '' then
      new = call('SADD', P .. ':s:' .. bucket, member)
      added = added + new
    end
    if new == 1 and given_up(host) then
      new = -1
    elseif new == 1 then
      local arrival = call('INCR', P .. ':arrival')
      new = arrival
      call('ZADD', queue_key(host), score, string.format('%016x', arrival) .. body)
      local key = host_key(host)
      if call('EXISTS', key) == 0 then
        call('HSET', key, 'v', 0, 'gap', ARGV[i + 5], 'lim', ARGV[i + 6], 'fl', 0)
      end
      if call('ZSCORE', hosts, host) == false then
        call('ZADD', hosts, fmt(ready_at(host)), host)
      end
      queued = queued + 1
    end
    out[#out + 1] = new
  end
  if queued > 0 then
    call('INCRBY', P .. ':n', queued)
  end
  if added > 0 then
    call('INCRBY', P .. ':seen_n', added)
  end
  return out
end
