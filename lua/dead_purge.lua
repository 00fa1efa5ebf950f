-- dead_purge: forget dead jobs in Redis (their MySQL rows stay, status dead).
-- KEYS[1] dead zset   KEYS[2] jobs hash   KEYS[3] attempts hash
-- ARGV[1..] job ids
-- Returns the number purged; ids not in the dead-letter set are skipped.

local dead, jobs, attempts = KEYS[1], KEYS[2], KEYS[3]
local count = 0
for _, id in ipairs(ARGV) do
  if redis.call('ZREM', dead, id) == 1 then
    redis.call('HDEL', jobs, id)
    redis.call('HDEL', attempts, id)
    count = count + 1
  end
end
return count
