-- Deletes a done marker if the key still holds the value the operator was
-- shown, so that a claim or marker written since is kept.
-- KEYS[1]  the key
-- ARGV[1]  the done marker's value, as read (redisstore.Record.Value)
-- Reply:   1 when deleted, 0 when the key holds anything else or nothing
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
