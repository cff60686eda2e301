-- ARGV: prefix, host, lease id, when it was sent (server time, as the worker
-- reckons it). The request left the worker later than its claim: the host's
-- gap counts from then (report_sent, common.lua). Reply: 1 if the lease still
-- held its place.
check_meta()
return report_sent(ARGV[2], ARGV[3], tonumber(ARGV[4]))
