-- ARGV: prefix, this worker's id, its heartbeat in milliseconds; a fourth
-- argument '0' ends it instead: the worker closes, and every lease it still
-- holds goes back first (their requests queued again, their places freed),
-- or nothing would ever reap them.
-- The worker is alive (beat, common.lua): renewed on a timer, so that a
-- worker that claims nothing for a while keeps its leases. Reply: 1 if the
-- worker had been taken for dead since its last heartbeat (another worker's
-- claim reaped its leases: its reactor was blocked past its heartbeat), else 0.
check_meta()
local worker = ARGV[2]
local reaped = call('DEL', P .. ':dead:' .. worker)
if ARGV[4] == '0' then
  requeue_worker(worker)  -- given back, not reaped: no other worker's news
  call('DEL', P .. ':hb:' .. worker)
  call('SREM', P .. ':workers', worker)
else
  beat(worker, tonumber(ARGV[3]))
end
return reaped
