-- ARGV: prefix, lease ids.
-- The crawl is done with these requests: forget their leases, and free the
-- place of any that had no feedback (dropped or cancelled before download).
-- Reply: {leases forgotten, places freed}.
check_meta()
local now = server_now()
local forgotten, freed = 0, 0
for i = 2, #ARGV do
  local f, r = forget_lease(ARGV[i], now)
  forgotten, freed = forgotten + f, freed + r
end
if forgotten > 0 then
  note_idle(now)
end
return {forgotten, freed}
