-- ARGV: prefix, origin, worker id, mode, seconds, then for mode 'answer':
-- status ('' for a network failure), body (compressed), truncated, gave up.
-- 'answer': the fetch is settled; its answer is kept for the fleet for
-- `seconds` (AIMD_ROBOTS_MAX_AGE), and the lock goes if it is this worker's.
-- 'retry': unreachable, this worker fetches again: it keeps the lock for
-- `seconds` (until its retry, plus a lease), or takes it if no one has it (a
-- lock whose worker's heartbeat expired is no one's: live_lock_owner).
-- Reply: 1 if the lock was this worker's.
check_meta()
local now = server_now()
local origin = ARGV[2]
local lock = robots_key(origin, true)
local ms = math.max(1, math.ceil(tonumber(ARGV[5]) * 1000))
local owner = live_lock_owner(origin)
local mine = owner == ARGV[3]
if ARGV[4] == 'answer' then
  local key = robots_key(origin)
  call('DEL', key)
  call('HSET', key, 's', ARGV[6], 'b', ARGV[7], 'x', ARGV[8], 'u', ARGV[9], 't', fmt(now))
  call('PEXPIRE', key, ms)
  if mine then
    call('DEL', lock)
  end
elseif mine then
  call('PEXPIRE', lock, ms)
elseif not owner then
  call('SET', lock, ARGV[3], 'PX', ms)
end
if mine then
  return 1
end
return 0
