-- ARGV: prefix, most leases to reap. Reply: requeued.
check_meta()
return reap(server_now(), tonumber(ARGV[2]))
