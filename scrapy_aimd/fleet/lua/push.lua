-- ARGV: prefix, then per request 7 values (push_requests, common.lua): host,
-- score, body, seen bucket ('' for none), seen member, the host's initial gap,
-- limit. Replies each one's arrival number, or 0 if its key was seen.
check_meta()
return push_requests(2, (#ARGV - 1) / 7)
