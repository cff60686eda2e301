-- ARGV: prefix, seconds, lease ids. The worker still holds these requests (a
-- download, or a callback or pipeline after it, still runs): each lease still
-- there holds at least that many seconds from now; a lease that would hold
-- longer keeps its end. A worker killed renews nothing, and its leases expire.
-- Reply: leases renewed.
check_meta()
local leases = P .. ':leases'
local ends = server_now() + tonumber(ARGV[2])
local renewed = 0
for i = 3, #ARGV do
  local score = call('ZSCORE', leases, ARGV[i])
  if score then
    if tonumber(score) < ends then
      call('ZADD', leases, fmt(ends), ARGV[i])
    end
    renewed = renewed + 1
  end
end
return renewed
