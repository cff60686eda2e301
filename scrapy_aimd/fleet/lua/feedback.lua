-- ARGV: prefix, then one feedback as store_feedback (common.lua) takes it:
-- host, expected version, state, gap, limit, pause, lease id ('' for none), '1'
-- to forget the lease ('0' to keep it until done), seconds the kept lease still
-- holds, tickets, entries of the host's log replayed, the last of them ('' for
-- none), the event's time, the turn asked for ('' for none); then this worker's id.
-- Reply: {1, new version, released, now, log entries left...}
--     or {0 (lost) or 2 (another's turn), version, state, now, tickets, the
--     turn's end, log entries...}.
-- (Answers go with claims, claim.lua; this one stores a feedback alone.)
check_meta()
local now = server_now()
local f = {}
for i = 2, 15 do
  f[#f + 1] = ARGV[i]
end
local status, version, third, tickets, turn = store_feedback(f, now, ARGV[16])
if status == 1 then
  return add_log({1, version, third, fmt(now)}, f[1])
end
return add_log({status, version, third, fmt(now), tickets, turn}, f[1])
