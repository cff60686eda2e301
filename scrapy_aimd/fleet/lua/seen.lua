-- ARGV: prefix, then pairs of seen bucket and member. Adds each member to its
-- bucket if absent. Reply: {keys in the set, then 1 (new) or 0 (seen) each}.
check_meta()
local out = {0}
local added = 0
for i = 2, #ARGV, 2 do
  local new = call('SADD', P .. ':s:' .. ARGV[i], ARGV[i + 1])
  added = added + new
  out[#out + 1] = new
end
out[1] = call('INCRBY', P .. ':seen_n', added)
return out
