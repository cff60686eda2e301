-- ARGV: prefix, lease ids.
-- The crawl is done with these requests: forget their leases, and free the
-- place of any that had no feedback (dropped or cancelled before download).
-- Reply: {leases forgotten, places freed}.
check_meta()
local now = server_now()
local forgotten, freed = 0, 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local lease = P .. ':l:' .. id
  local l = call('HMGET', lease, 'h', 'r')
  if l[1] then
    settle_send(l[1], id)
    if not l[2] then
      add_in_flight(l[1], -1)
      log_event(l[1], 'c', id, now)
      freed = freed + 1
    end
    call('DEL', lease)
    call('ZREM', P .. ':leases', id)
    rescore(l[1])
    forgotten = forgotten + 1
  end
end
if forgotten > 0 then
  note_idle(now)
end
return {forgotten, freed}
