-- Claims a key unless it holds a live claim or a done marker.
-- KEYS[1]  the key
-- KEYS[2]  absent, or the key's awaited mark (a key in its hash slot): when
--          KEYS[1] holds another token's claim, the mark is set to expire
--          with that claim's lease, so that its complete or release
--          notifies (complete.lua); a key that is not a mark is left alone
-- ARGV[1]  "F" .. token (17 bytes), the prefix that names the claim's owner
-- ARGV[2]  the fingerprint
-- ARGV[3]  the lease in milliseconds
-- ARGV[4]  absent, or "w" when a WAIT follows: a claim this token holds
--          already, or a done marker, is then written again (its TTL set
--          to what it has left), so that the WAIT covers what the reply
--          reports and not only this connection's earlier writes
-- Reply:   the claim's fence (an integer: the server clock in microseconds
--          since the Unix epoch) when claimed; the fence stored with the
--          claim when this token holds it already (the same request sent
--          again, as a client does after a reply was lost); otherwise
--          {current value, remaining TTL in ms}.
-- The fence is stored after the owner as 8 bytes, big-endian, packed with
-- arithmetic (exact: doubles hold microseconds since the epoch below 2^53,
-- until the year 2255), so the script needs no library beyond Lua's own;
-- one string.char of two 32-bit halves costs less than a loop and a table.
local v = redis.call('GET', KEYS[1])
if not v then
  local now = redis.call('TIME')
  local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local f = math.floor
  local hi = f(fence / 4294967296)
  local lo = fence - hi * 4294967296
  redis.call('SET', KEYS[1], ARGV[1] .. string.char(
    f(hi / 16777216) % 256, f(hi / 65536) % 256, f(hi / 256) % 256, hi % 256,
    f(lo / 16777216) % 256, f(lo / 65536) % 256, f(lo / 256) % 256, lo % 256) .. ARGV[2], 'PX', ARGV[3])
  return fence
end
local mine = string.sub(v, 1, 17) == ARGV[1]
local done = not mine and string.sub(v, 1, 1) ~= 'F' and string.sub(v, 1, 1) ~= 'R'
local left
if ARGV[4] and (mine or done) then
  left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    redis.call('PEXPIRE', KEYS[1], left)
  end
end
if mine then
  local fence = 0
  for i = 18, 25 do
    fence = fence * 256 + string.byte(v, i)
  end
  return fence
end
left = left or redis.call('PTTL', KEYS[1])
if KEYS[2] and not done and left > 0 then
  local m = redis.call('GET', KEYS[2])
  if not m or m == 'a' then
    redis.call('SET', KEYS[2], 'a', 'PX', left)
  end
end
return {v, left}
