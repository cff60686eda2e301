-- ARGV: prefix, format, seen buckets, fingerprint rules id.
-- Creates the fleet's meta key, or checks that the one there is ours.
local meta = P .. ':meta'
local kind = redis.call('TYPE', meta).ok
local now = server_now()
if kind == 'none' then
  local expected = {hosts = 'zset', leases = 'zset', n = 'string', arrival = 'string'}
  for suffix, type_ in pairs(expected) do
    local key = P .. ':' .. suffix
    local found = redis.call('TYPE', key).ok
    if found ~= 'none' then
      fail(key, 'exists (a ' .. found .. ') without ' .. meta .. ': the prefix is used by something else')
    end
  end
  redis.call('HSET', meta, 'kind', 'scrapy-aimd-fleet', 'format', ARGV[2], 'buckets', ARGV[3],
    'rules', ARGV[4], 'created', fmt(now))
  redis.call('SET', P .. ':n', 0)
  redis.call('SET', P .. ':idle_since', fmt(now))
elseif kind ~= 'hash' then
  fail(meta, 'is a ' .. kind .. ', not a scrapy-aimd fleet')
end
local m = redis.call('HMGET', meta, 'kind', 'format', 'buckets', 'rules')
if m[1] ~= 'scrapy-aimd-fleet' then
  fail(meta, 'is not a scrapy-aimd fleet (kind ' .. tostring(m[1]) .. ')')
end
if m[2] ~= ARGV[2] then
  fail(meta, 'is a scrapy-aimd fleet of format ' .. tostring(m[2]) .. '; this version reads format ' .. ARGV[2])
end
if m[4] ~= ARGV[4] then
  fail(meta, 'was made under other fingerprint rules (' .. tostring(m[4]) .. ', this worker: ' .. ARGV[4] .. ')')
end
local buckets = tonumber(m[3])
if buckets == nil then
  fail(meta, 'field buckets is not a number: ' .. tostring(m[3]))
end
return {fmt(now), m[3]}
