-- Claims a key unless it holds a live claim or a done marker.
-- KEYS[1]  the key
-- ARGV[1]  the claim's value: "R" .. token (16 bytes) .. fingerprint
-- ARGV[2]  the lease in milliseconds
-- Reply:   1 when claimed, or already held by this token (the same request
--          sent again, as a client does after a reply was lost);
--          otherwise {current value, remaining TTL in ms}
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if string.sub(v, 1, 17) == string.sub(ARGV[1], 1, 17) then
  return 1
end
return {v, redis.call('PTTL', KEYS[1])}
