-- ARGV: prefix, origin. The origin's robots.txt answer, if a worker of the
-- fleet fetched it: {1, now, status, body, truncated, gave up, age}, or {0, now}.
check_meta()
local now = server_now()
local reply = {1, fmt(now)}
if not add_robots_answer(reply, ARGV[2], now) then
  return {0, fmt(now)}
end
return reply
