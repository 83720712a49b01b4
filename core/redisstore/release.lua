-- Deletes a claim if the token still holds it.
-- KEYS[1]  the key
-- KEYS[2]  absent, or the key's awaited mark (see claim.lua): when the claim
--          was awaited, the mark is deleted and the key published on its
--          own channel, with PUBLISH, or with SPUBLISH when ARGV[2] is "s"
--          (Redis Cluster); a publish the user may not make is left out, as
--          in complete.lua
-- ARGV[1]  "F" .. token (17 bytes)
-- ARGV[2]  absent, or "s" (see KEYS[2])
-- Reply:   1 when deleted, 0 when the token does not hold the key
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 17) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] and redis.call('GET', KEYS[2]) == 'a' then
    redis.call('DEL', KEYS[2])
    redis.pcall(ARGV[2] == 's' and 'SPUBLISH' or 'PUBLISH', KEYS[1], 'released')
  end
  return 1
end
return 0
