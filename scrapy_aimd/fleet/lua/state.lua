-- ARGV: prefix, host. Reply: {version, state, tickets, log entries...}: the
-- host's stored state as a claim's reply would carry it (for a worker whose
-- claim's reply left the state out, as its own, when it no longer holds it).
check_meta()
local host = ARGV[2]
local h = call('HMGET', host_key(host), 'v', 'st', 'tk')
return add_log({h[1] or '0', h[2] or '', h[3] or ''}, host)
