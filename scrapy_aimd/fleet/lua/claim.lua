-- ARGV: prefix, lease seconds, most expired leases to reap first.
-- Takes the first request of a host that may start now (by its gap, its
-- limit against its in-flight count and its pause, on the server's clock),
-- leases it and files the host again. A host that may not start is filed at
-- the time it may; it never holds up another.
-- Reply: {1, lease id, host, member, started, expires, version, state, tickets,
--         reaped, log entries...}
--     or {0, next ready time, now, queued, leased, reaped}.
check_meta()
local now = server_now()
local reaped = reap(now, tonumber(ARGV[3]))
local hosts = P .. ':hosts'
local lease_time = tonumber(ARGV[2])
while true do
  local first = call('ZRANGEBYSCORE', hosts, '-inf', fmt(now), 'LIMIT', 0, 1)
  if #first == 0 then
    break
  end
  local host = first[1]
  local at = ready_at(host)
  if at > now then
    call('ZADD', hosts, fmt(at), host)
  else
    local popped = call('ZPOPMIN', queue_key(host))
    if #popped == 0 then
      call('ZREM', hosts, host)
    else
      local member, score = popped[1], popped[2]
      local id = string.sub(member, 1, 16)
      local key = host_key(host)
      add_in_flight(host, 1)
      call('HSET', key, 'last', fmt(now))
      await_send(host, id, now)
      log_event(host, 's', id, now)
      local expires = now + lease_time
      call('HSET', P .. ':l:' .. id, 'h', host, 's', score, 'm', member, 't', fmt(now))
      call('ZADD', P .. ':leases', fmt(expires), id)
      call('DECR', P .. ':n')
      rescore(host)
      local st = call('HMGET', key, 'v', 'st', 'tk')
      local reply = {1, id, host, member, fmt(now), fmt(expires), st[1] or '0', st[2] or '',
        st[3] or '', reaped}
      for _, entry in ipairs(call('LRANGE', log_key(host), 0, -1)) do
        reply[#reply + 1] = entry
      end
      return reply
    end
  end
end
local next_host = call('ZRANGE', hosts, 0, 0, 'WITHSCORES')
return {0, next_host[2] or 'inf', fmt(now), call('GET', P .. ':n') or '0',
  call('ZCARD', P .. ':leases'), reaped}
