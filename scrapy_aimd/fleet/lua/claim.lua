-- ARGV: prefix, lease seconds, most expired leases to reap first, how many
-- requests to claim at most ('0': only what the call carries), then how many requests to queue, sent
-- reports, feedbacks and done leases it carries, this worker's id, how many
-- leases it gives back, the worker's heartbeat in milliseconds (beat,
-- common.lua: a call is a sign of life), and those: each request as
-- push.lua takes it (7 values), each sent report as host, lease id, time
-- (report_sent, common.lua); each feedback as 5 values (see feedback_at: the 14 values of
-- store_feedback in common.lua, and '1' if its reply should carry the host's
-- log); each done lease as its id;
-- each lease given back as its id (put back in its queue at once).
-- What a worker learnt since its last call goes with its next claim, in this
-- order: the requests queued (before the leases of their parents go), the
-- sends, the answers (a host whose feedback lost the race here, or was told to
-- wait for another worker's turn, takes no later feedback of this call: each
-- was computed on the one before), the leases
-- done, the leases given back (their requests queued again, their places
-- freed); then the claims.
-- A claim takes the first request of a host that may start now (by its gap,
-- its limit against its in-flight count and its pause, on the server's clock),
-- leases it and files the host again. A host that may not start is filed at
-- the time it may; it never holds up another.
-- Reply, packed as one flat list (see pack, common.lua: one string for the
-- worker to cut apart, not one per part): now, leases forgotten, how many
-- leases were given back, how many arrival numbers and those (one per request
-- queued, as push.lua's), how many values of feedbacks and those, then the
-- claims' records, each as how many values it has and those. Claims: 1, lease
-- id, host, member, started, expires, version, state, tickets, reaped (the
-- first claim's), log entries... (state '=' and tickets '' when this worker
-- stored that version: it holds them); then, when fewer were made than asked
-- (none, or some: no host may start now), one more: 0, next ready time, now,
-- queued, leased, reaped (0 after claims); or nothing when none was asked
-- for. Feedbacks: for each, 1, new version, released, '', '', then how many
-- log entries and those (the log if asked: else 0); or 0 (lost) or 2 (another
-- worker's turn), version, state, tickets, the turn's end (for 0: the turn
-- granted to this worker, '' for none), the count and the log.
-- Last, a record for each host given up on (P:gaveup) whose queue the claims
-- found requests in (an expired lease's, one given back): 2, host, the
-- members drained (drain, common.lua), for this worker to fail. Before the
-- claims' records, one for each host on which a lease done or given back by
-- this call logged a cancel (its place had no feedback): 3, host, version, log
-- entries... (the worker's next answer of the host replays them).
check_meta()
local now = server_now()
local n_push, n_sent = tonumber(ARGV[5]), tonumber(ARGV[6])
local n_feedback, n_done = tonumber(ARGV[7]), tonumber(ARGV[8])
local token = ARGV[9]
local n_back = tonumber(ARGV[10])
beat(token, tonumber(ARGV[11]))
local pushed = push_requests(12, n_push)
local i = 12 + 7 * n_push
for _ = 1, n_sent do
  report_sent(ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]))
  i = i + 3
end
-- A feedback of the call at ARGV[i]: host, state, tickets, the last log entry
-- replayed ('' for none), and the rest in one string, separated by spaces:
-- expected version, gap, limit, pause, lease id ('-' for none), '1' to forget
-- the lease, seconds the kept lease holds, entries replayed, the event's time,
-- the turn asked for ('-' for none), '1' if the reply should carry the log.
-- Returns store_feedback's table, and whether to carry the log.
local function feedback_at(i)
  local w = {}
  for word in string.gmatch(ARGV[i + 4], '%S+') do
    w[#w + 1] = word
  end
  if #w ~= 11 then
    error('a feedback of ' .. #w .. ' values, not 11: ' .. ARGV[i + 4])
  end
  local lease = w[5] == '-' and '' or w[5]
  local turn = w[10] == '-' and '' or w[10]
  return {ARGV[i], w[1], ARGV[i + 1], w[2], w[3], w[4], lease, w[6], w[7], ARGV[i + 2],
    w[8], ARGV[i + 3], w[9], turn}, w[11] == '1'
end
-- Appends the values to the list out.
local function extend(out, values)
  for _, v in ipairs(values) do
    out[#out + 1] = v
  end
end
local results = {}
local lost = {}
local function add_result(values, host, with_log)
  local log = with_log and call('LRANGE', log_key(host), 0, -1) or {}
  extend(results, values)
  results[#results + 1] = #log
  extend(results, log)
end
for _ = 1, n_feedback do
  local f, with_log = feedback_at(i)
  local host = f[1]
  local status, version, third, tickets, turn
  local first = lost[host]
  if first then
    -- Computed on the one before, which was not stored: told as it was.
    local h = call('HMGET', host_key(host), 'v', 'st', 'tk')
    status, version, third, tickets, turn = first[1], h[1] or '0', h[2] or '', h[3] or '', first[2]
  else
    status, version, third, tickets, turn = store_feedback(f, now, token)
  end
  if status == 1 then
    add_result({1, version, third, '', ''}, host, with_log)
  else
    lost[host] = first or {status, turn}
    add_result({status, version, third, tickets, turn}, host, true)
  end
  i = i + 5
end
-- Hosts on which this call's own leases done or given back logged a cancel:
-- the reply carries their logs, so that the worker's next answer of the host
-- replays its own cancels (else it would lose its race to itself).
local cancelled, views = {}, {}
local function note_cancel(host)
  if host and not cancelled[host] then
    cancelled[host] = true
    views[#views + 1] = host
  end
end
local forgotten = 0
for _ = 1, n_done do
  local f, freed, host = forget_lease(ARGV[i], now)
  forgotten = forgotten + f
  if freed == 1 then
    note_cancel(host)
  end
  i = i + 1
end
if forgotten > 0 then
  note_idle(now)
end
local given = 0
for _ = 1, n_back do
  local queued, host = requeue(ARGV[i])
  if queued then
    given = given + 1
  end
  note_cancel(host)
  i = i + 1
end
for j, host in ipairs(views) do
  views[j] = add_log({3, host, call('HGET', host_key(host), 'v') or '0'}, host)
end
-- The reply (see above), with the logs of hosts cancelled on, then the claims' records.
local function reply(records)
  local out = {fmt(now), forgotten, given, #pushed}
  extend(out, pushed)
  out[#out + 1] = #results
  extend(out, results)
  for _, record in ipairs(views) do
    out[#out + 1] = #record
    extend(out, record)
  end
  for _, record in ipairs(records) do
    out[#out + 1] = #record
    extend(out, record)
  end
  return pack(out)
end
local wanted = tonumber(ARGV[4])
if wanted < 1 then
  return reply({})
end
local reaped = reap_dead(token) + reap(now, tonumber(ARGV[3]))
local hosts = P .. ':hosts'
local lease_time = tonumber(ARGV[2])
local claims = {}
local gone = {}
while #claims < wanted do
  local first = call('ZRANGEBYSCORE', hosts, '-inf', fmt(now), 'LIMIT', 0, 1)
  if #first == 0 then
    break
  end
  local host = first[1]
  local gave_up = given_up(host)
  local at = gave_up and -INF or ready_at(host)
  if gave_up then
    -- Requests back in the queue of a host given up on (an expired lease's, one
    -- given back): not claimed, handed to this worker to fail.
    local record = {2, host}
    extend(record, drain(host, now))
    gone[#gone + 1] = record
  elseif at > now then
    call('ZADD', hosts, fmt(at), host)
  else
    local popped = call('ZPOPMIN', queue_key(host))
    if #popped == 0 then
      call('ZREM', hosts, host)
    else
      local member, score = popped[1], popped[2]
      -- Each claim's lease is its own number (from the arrival counter, as a
      -- hold's): a request queued again is claimed under a new id, so that a
      -- stale worker's done, answer, send or give-back of its expired lease
      -- finds no lease and touches nothing of the new one (a late lease).
      local id = string.format('%016x', call('INCR', P .. ':arrival'))
      local key = host_key(host)
      add_in_flight(host, 1)
      call('HSET', key, 'last', fmt(now))
      await_send(host, id, now)
      log_event(host, 's', id, now)
      local expires = now + lease_time
      call('HSET', P .. ':l:' .. id, 'h', host, 's', score, 'm', member, 't', fmt(now),
        'w', token)
      add_lease(id, token, expires)
      call('DECR', P .. ':n')
      rescore(host)
      local st = call('HMGET', key, 'v', 'w')
      local state, tickets = '=', ''
      if st[2] ~= token then
        local stored = call('HMGET', key, 'st', 'tk')
        state, tickets = stored[1] or '', stored[2] or ''
      end
      local claim = {1, id, host, member, fmt(now), fmt(expires), st[1] or '0', state,
        tickets, #claims == 0 and reaped or 0}
      claims[#claims + 1] = add_log(claim, host)
    end
  end
end
if #claims < wanted then
  -- None, or fewer than asked: no host may start now. When the first may, as the
  -- record of a miss, after the claims if any (the worker asks again at once
  -- for the room left, and knows the answer).
  local next_host = call('ZRANGE', hosts, 0, 0, 'WITHSCORES')
  local queued = num(P .. ':n', 'value', call('GET', P .. ':n'), 0)
  if queued > 0 and #next_host == 0 then
    -- Counted but in no filed host's queue: never claimable, and the fleet
    -- never idle, so every worker would wait for ever.
    fail(P .. ':n', 'counts ' .. queued .. ' queued requests, but no host in ' .. hosts
      .. ' has any (a queue or the index was deleted or changed)')
  end
  claims[#claims + 1] = {0, next_host[2] or 'inf', fmt(now), fmt(queued),
    call('ZCARD', P .. ':leases'), #claims == 0 and reaped or 0}
end
extend(claims, gone)
return reply(claims)
