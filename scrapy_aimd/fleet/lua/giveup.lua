-- ARGV: prefix, host. AIMD_HOST_GIVE_UP: a worker's budget for the host ran out,
-- so the fleet gives it up: the host joins P:gaveup (for good: pushes of its
-- requests and claims of what comes back to its queue hand them to the worker
-- to fail), and its queue is drained (see drain, common.lua).
-- Reply: {1 if this call gave it up (0: another worker did first), the
-- members drained...}.
check_meta()
local host = ARGV[2]
local added = call('SADD', P .. ':gaveup', host)
local reply = {added}
for _, member in ipairs(drain(host, server_now())) do
  reply[#reply + 1] = member
end
return reply
