-- ARGV: prefix, host, lease id, when it was sent (server time, as the worker
-- reckons it). The request left the worker later than its claim: the host's
-- gap counts from then, so that two workers' requests reach the host no
-- closer than the gap (a single process does the same with
-- HostController.sent). Reply: 1 if the lease still held its place.
check_meta()
local host = ARGV[2]
local l = call('HMGET', P .. ':l:' .. ARGV[3], 'h', 'r')
if l[1] ~= host or l[2] then
  return 0
end
local key = host_key(host)
local t = tonumber(ARGV[4])
local last = num(key, 'last', call('HGET', key, 'last'), -INF)
if t > last then
  call('HSET', key, 'last', fmt(t))
end
settle_send(host, ARGV[3])
rescore(host)
return 1
