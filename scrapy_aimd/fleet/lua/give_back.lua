-- ARGV: prefix, lease ids. This worker will not finish these requests (it
-- stops): back to their queues now, rather than when their leases expire.
-- Reply: how many were put back.
check_meta()
local back = 0
for i = 2, #ARGV do
  if requeue(ARGV[i]) then
    back = back + 1
  end
end
return back
