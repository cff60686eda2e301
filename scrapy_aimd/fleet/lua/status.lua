-- ARGV: prefix. Reply: {queued, leased, idle since ('' when busy), now, reaped, seen}.
-- Each count is read by num(): one that is not a number is named (a corrupt key).
check_meta()
local now = server_now()
local function count(name)
  local key = P .. ':' .. name
  local value = call('GET', key)
  local n = num(key, 'value', value, false)
  if n and (n ~= n or n == INF or n == -INF) then  -- tonumber takes 'inf' and 'nan'
    fail(key, 'value is not a number: ' .. value)
  end
  return n
end
local queued = count('n') or 0
local leased = call('ZCARD', P .. ':leases')
local idle = ''
local idle_since = count('idle_since')
if queued <= 0 and leased == 0 then
  idle = fmt(idle_since or now)
end
return {fmt(queued), leased, idle, fmt(now), fmt(count('reaped') or 0), fmt(count('seen_n') or 0)}
