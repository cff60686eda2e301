-- ARGV: prefix. Reply: {queued, leased, idle since ('' when busy), now, reaped, seen}.
check_meta()
local now = server_now()
local queued = call('GET', P .. ':n') or '0'
local leased = call('ZCARD', P .. ':leases')
local idle = ''
if tonumber(queued) <= 0 and leased == 0 then
  idle = call('GET', P .. ':idle_since') or fmt(now)
end
return {queued, leased, idle, fmt(now), call('GET', P .. ':reaped') or '0',
  call('GET', P .. ':seen_n') or '0'}
