-- ARGV: prefix, host, lease seconds, the host's initial gap, limit.
-- A place on the host for a request that this worker keeps (its robots.txt),
-- taken by the same rule as a claim (the gap, the limit against the in-flight
-- count, the pause), leased and logged as a start: the host's politeness
-- counts it fleet-wide, though it was never queued. An expired hold frees its
-- place and nothing else.
-- Reply: as a claim's, with no member: {1, lease id, host, '', started,
--   expires, version, state, tickets, 0, log entries...} or {0, ready time, now}.
check_meta()
local now = server_now()
local host = ARGV[2]
local key = host_key(host)
if call('EXISTS', key) == 0 then
  call('HSET', key, 'v', 0, 'gap', ARGV[4], 'lim', ARGV[5], 'fl', 0)
end
local at = ready_at(host)
if at > now then
  return {0, fmt(at), fmt(now)}
end
-- Lease ids of queued requests are their arrival numbers: a hold takes one too.
local id = string.format('%016x', call('INCR', P .. ':arrival'))
add_in_flight(host, 1)
call('HSET', key, 'last', fmt(now))
await_send(host, id, now)
log_event(host, 's', id, now)
local expires = now + tonumber(ARGV[3])
call('HSET', P .. ':l:' .. id, 'h', host, 't', fmt(now))
call('ZADD', P .. ':leases', fmt(expires), id)
rescore(host)
local st = call('HMGET', key, 'v', 'st', 'tk')
local reply = {1, id, host, '', fmt(now), fmt(expires), st[1] or '0', st[2] or '',
  st[3] or '', 0}
for _, entry in ipairs(call('LRANGE', log_key(host), 0, -1)) do
  reply[#reply + 1] = entry
end
return reply
