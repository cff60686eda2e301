-- ARGV: prefix, host, expected version, state (JSON), gap, limit, pause,
-- lease id ('' for none), '1' to forget the lease ('0' to keep it until done),
-- seconds the kept lease still holds.
-- Stores the host's new controller state if its version did not move
-- (check-and-set), and releases the lease's place in the same step.
-- Reply: {1, new version, released, now} or {0, version, state, now}.
check_meta()
local now = server_now()
local host = ARGV[2]
local key = host_key(host)
local v = call('HMGET', key, 'v', 'st')
local version = num(key, 'v', v[1], 0)
if fmt(version) ~= ARGV[3] then
  return {0, fmt(version), v[2] or '', fmt(now)}
end
call('HSET', key, 'v', fmt(version + 1), 'st', ARGV[4], 'gap', ARGV[5], 'lim', ARGV[6],
  'pause', ARGV[7])
local released = 0
local id = ARGV[8]
if id ~= '' then
  local lease = P .. ':l:' .. id
  local l = call('HMGET', lease, 'h', 'r')
  if l[1] == host then
    released = 1
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
return {1, fmt(version + 1), released, fmt(now)}
