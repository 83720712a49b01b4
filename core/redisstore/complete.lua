-- Replaces a claim with a done marker if the token still holds it.
-- KEYS[1]  the key
-- KEYS[2]  absent, or the key's awaited mark (see claim.lua): when the claim
--          it replaces was awaited, the mark is deleted and the key
--          published on its own channel, with PUBLISH, or with SPUBLISH
--          when ARGV[4] is "s" (Redis Cluster); a publish the user may not
--          make (NOPERM: no ACL for the channel) is left out, since the
--          marker is written and a script's error would not undo it
-- ARGV[1]  "F" .. token (17 bytes)
-- ARGV[2]  the done marker: "w" .. writer (the token's first 8 bytes), then
--          "d" .. fingerprint, or with a result
--          "D" .. fingerprint length (1 byte) .. fingerprint .. result;
--          or, under Config.LegacyMarkers, the "d" or "D" value alone
-- ARGV[3]  the retention in milliseconds
-- ARGV[4]  absent, or "s" (see KEYS[2])
-- Reply:   1 when completed, or when the key holds a done marker whose
--          writer is this token (the same request sent again: after its
--          reply was lost, or unacknowledged), whose TTL is then set again
--          to what it has left, so that a WAIT after this script covers the
--          marker; 0 when the token neither holds the key nor wrote its
--          marker (a marker that names no writer is nobody's)
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
if string.sub(v, 1, 17) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  if KEYS[2] and redis.call('GET', KEYS[2]) == 'a' then
    redis.call('DEL', KEYS[2])
    redis.pcall(ARGV[4] == 's' and 'SPUBLISH' or 'PUBLISH', KEYS[1], 'done')
  end
  return 1
end
if string.sub(v, 1, 1) == 'w' and string.sub(v, 2, 9) == string.sub(ARGV[1], 2, 9) then
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    redis.call('PEXPIRE', KEYS[1], left)
  end
  return 1
end
return 0
