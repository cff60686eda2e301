-- ARGV: prefix, host. Reply: {version, state, gap, limit, pause, in flight, last start, queued, now}.
check_meta()
local host = ARGV[2]
local f = call('HMGET', host_key(host), 'v', 'st', 'gap', 'lim', 'pause', 'fl', 'last')
return {f[1] or '', f[2] or '', f[3] or '', f[4] or '', f[5] or '', f[6] or '', f[7] or '',
  call('ZCARD', queue_key(host)), fmt(server_now())}
