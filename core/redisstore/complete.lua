-- Replaces a claim with a done marker if the token still holds it.
-- KEYS[1]  the key
-- ARGV[1]  "F" .. token (17 bytes)
-- ARGV[2]  the done marker: "d" .. fingerprint, or with a result
--          "D" .. fingerprint length (1 byte) .. fingerprint .. result
-- ARGV[3]  the retention in milliseconds
-- ARGV[4]  absent, or "1" when the request is sent again after an attempt
--          that may have written the marker (driver.CompleteRequest.Again):
--          a marker equal to ARGV[2] is then this token's own, written again
--          so that a WAIT after it covers it
-- Reply:   1 when completed, 0 when the token does not hold the key
local v = redis.call('GET', KEYS[1])
if v and (string.sub(v, 1, 17) == ARGV[1] or (ARGV[4] == '1' and v == ARGV[2])) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
