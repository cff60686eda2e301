-- ARGV: prefix, then one feedback as store_feedback (common.lua) takes it:
-- host, expected version, state, gap, limit, pause, lease id ('' for none), '1'
-- to forget the lease ('0' to keep it until done), seconds the kept lease still
-- holds, tickets, entries of the host's log replayed, the last of them ('' for
-- none), the event's time; then this worker's id.
-- Reply: {1, new version, released, now, log entries left...}
--     or {0, version, state, now, tickets, log entries...}.
check_meta()
local now = server_now()
local f = {}
for i = 2, 14 do
  f[#f + 1] = ARGV[i]
end
local ok, version, third, tickets = store_feedback(f, now, ARGV[15])
if ok then
  return add_log({1, version, third, fmt(now)}, f[1])
end
return add_log({0, version, third, fmt(now), tickets}, f[1])
