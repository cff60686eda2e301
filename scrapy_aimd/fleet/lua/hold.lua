-- ARGV: prefix, host, lease seconds, the host's initial gap, limit, the
-- robots.txt origin, this worker's id, its heartbeat in milliseconds (beat,
-- common.lua).
-- A place on the host for a request that this worker keeps (its robots.txt),
-- taken by the same rule as a claim (the gap, the limit against the in-flight
-- count, the pause), leased and logged as a start: the host's politeness
-- counts it fleet-wide, though it was never queued. An expired hold frees its
-- place and nothing else.
-- robots.txt is fetched once per fleet: if a worker stored the origin's answer,
-- it is the reply; if another worker holds the origin's lock (P:rl:<origin>), it
-- is fetching: wait. The place taken, the lock is this worker's for the lease.
-- Without an origin (''), a place and nothing else.
-- Reply: as a claim's, with no member: {1, lease id, host, '', started,
--   expires, version, state, tickets, 0, log entries...}; {0, ready time, now};
--   or the stored answer, {2, now, status, body, truncated, gave up, age}.
check_meta()
local now = server_now()
local host = ARGV[2]
local origin = ARGV[6]
beat(ARGV[7], tonumber(ARGV[8]))
if origin ~= '' then
  local answer = {2, fmt(now)}
  if add_robots_answer(answer, origin, now) then
    return answer
  end
  local owner = call('GET', robots_key(origin, true))
  if owner and owner ~= ARGV[7] and call('EXISTS', P .. ':hb:' .. owner) == 0 then
    -- Its worker is dead: its leases and its locks go now.
    reap_dead(ARGV[7])
    owner = call('GET', robots_key(origin, true))
  end
  if owner and owner ~= ARGV[7] then
    -- Asked again when the lock expires, or sooner (the worker polls).
    local ttl = math.max(50, call('PTTL', robots_key(origin, true)))
    return {0, fmt(now + ttl / 1000), fmt(now)}
  end
end
local key = host_key(host)
if call('EXISTS', key) == 0 then
  call('HSET', key, 'v', 0, 'gap', ARGV[4], 'lim', ARGV[5], 'fl', 0)
end
local at = ready_at(host)
if at > now then
  return {0, fmt(at), fmt(now)}
end
-- Every lease takes a number of its own from the arrival counter, as a claim's.
local id = string.format('%016x', call('INCR', P .. ':arrival'))
add_in_flight(host, 1)
call('HSET', key, 'last', fmt(now))
await_send(host, id, now)
log_event(host, 's', id, now)
local expires = now + tonumber(ARGV[3])
if origin ~= '' then
  call('SET', robots_key(origin, true), ARGV[7], 'PX', math.max(1, math.ceil(tonumber(ARGV[3]) * 1000)))
end
call('HSET', P .. ':l:' .. id, 'h', host, 't', fmt(now), 'w', ARGV[7])
if origin ~= '' then
  call('HSET', P .. ':l:' .. id, 'o', origin)
end
call('ZADD', P .. ':leases', fmt(expires), id)
rescore(host)
local st = call('HMGET', key, 'v', 'st', 'tk')
local reply = {1, id, host, '', fmt(now), fmt(expires), st[1] or '0', st[2] or '',
  st[3] or '', 0}
for _, entry in ipairs(call('LRANGE', log_key(host), 0, -1)) do
  reply[#reply + 1] = entry
end
return reply
