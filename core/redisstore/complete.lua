-- Replaces a claim with a done marker if the token still holds it.
-- KEYS[1]  the key
-- ARGV[1]  "F" .. token (17 bytes)
-- ARGV[2]  the done marker: "d" .. fingerprint, or with a result
--          "D" .. fingerprint length (1 byte) .. fingerprint .. result
-- ARGV[3]  the retention in milliseconds
-- ARGV[4]  absent, or, for a request sent again after its marker was
--          written but not acknowledged (driver.CompleteRequest.WrittenBefore),
--          the most retention in milliseconds that marker can have left: a
--          marker equal to ARGV[2] with no more left is this token's own,
--          written again so that a WAIT after it covers it; one with more
--          left was written later, by another copy
-- Reply:   1 when completed, 0 when the token does not hold the key
local v = redis.call('GET', KEYS[1])
if v and (string.sub(v, 1, 17) == ARGV[1] or
    (ARGV[4] and v == ARGV[2] and redis.call('PTTL', KEYS[1]) <= tonumber(ARGV[4]))) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
