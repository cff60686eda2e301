-- ARGV: prefix, then per request 7 values: host, score, body, seen bucket
-- ('' for none), seen member, the host's initial gap, limit.
-- Adds each request's key to the seen set if absent (or takes it anyway when
-- no bucket is given) and queues it; replies its arrival number (queued: its
-- lease id when claimed, in hex) or 0 (seen) each.
check_meta()
local out = {}
local queued, added = 0, 0
local hosts = P .. ':hosts'
for i = 2, #ARGV, 7 do
  local host, score, body, bucket, member = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local new = 1
  if bucket ~= '' then
    new = call('SADD', P .. ':s:' .. bucket, member)
    added = added + new
  end
  if new == 1 then
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
