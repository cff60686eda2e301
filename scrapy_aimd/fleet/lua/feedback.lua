-- ARGV: prefix, host, expected version, state (JSON), gap, limit, pause,
-- lease id ('' for none), '1' to forget the lease ('0' to keep it until done),
-- seconds the kept lease still holds, tickets (JSON), entries of the host's
-- log replayed, the last of them ('' for none), the event's time.
-- Stores the host's new controller state if its version did not move and the
-- worker replayed exactly the log entries up to the event (check-and-set),
-- drops those entries, and releases the lease's place in the same step.
-- Reply: {1, new version, released, now, log entries left...}
--     or {0, version, state, now, tickets, log entries...}.
check_meta()
local now = server_now()
local host = ARGV[2]
local key = host_key(host)
local log = log_key(host)
local v = call('HMGET', key, 'v', 'st', 'tk')
local version = num(key, 'v', v[1], 0)
local replayed = tonumber(ARGV[12])
local at = tonumber(ARGV[14])
local current = fmt(version) == ARGV[3]
if current and replayed > 0 then
  current = call('LINDEX', log, replayed - 1) == ARGV[13]
end
if current then
  local next_entry = call('LINDEX', log, replayed)
  if next_entry then
    local t = tonumber(string.match(next_entry, ' ([^ ]+)$'))
    current = t ~= nil and t > at
  end
end
if not current then
  local reply = {0, fmt(version), v[2] or '', fmt(now), v[3] or ''}
  for _, entry in ipairs(call('LRANGE', log, 0, -1)) do
    reply[#reply + 1] = entry
  end
  return reply
end
call('HSET', key, 'v', fmt(version + 1), 'st', ARGV[4], 'gap', ARGV[5], 'lim', ARGV[6],
  'pause', ARGV[7], 'tk', ARGV[11])
if replayed > 0 then
  call('LTRIM', log, replayed, -1)
end
local released = 0
local id = ARGV[8]
if id ~= '' then
  local lease = P .. ':l:' .. id
  local l = call('HMGET', lease, 'h', 'r')
  if l[1] == host then
    released = 1
    settle_send(host, id)
    if not l[2] then
      add_in_flight(host, -1)
      call('HSET', lease, 'r', 1)
    end
    if ARGV[9] == '1' then
      call('DEL', lease)
      call('ZREM', P .. ':leases', id)
      note_idle(now)
    else
      call('ZADD', P .. ':leases', fmt(now + tonumber(ARGV[10])), id)
    end
  end
end
rescore(host)
local reply = {1, fmt(version + 1), released, fmt(now)}
for _, entry in ipairs(call('LRANGE', log, 0, -1)) do
  reply[#reply + 1] = entry
end
return reply
