-- Renews the lease of a claim if the token still holds it.
-- KEYS[1]  the key
-- ARGV[1]  "F" .. token (17 bytes)
-- ARGV[2]  the lease in milliseconds
-- Reply:   1 when renewed, 0 when the token does not hold the key
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 17) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
