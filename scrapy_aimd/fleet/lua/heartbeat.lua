-- ARGV: prefix, this worker's id, its heartbeat in milliseconds; a fourth
-- argument '0' ends it instead (the worker closes, its leases given back).
-- The worker is alive (beat, common.lua): renewed on a timer, so that a
-- worker that claims nothing for a while keeps its leases. Reply: 1.
check_meta()
if ARGV[4] == '0' then
  call('DEL', P .. ':hb:' .. ARGV[2])
  call('SREM', P .. ':workers', ARGV[2])
else
  beat(ARGV[2], tonumber(ARGV[3]))
end
return 1
