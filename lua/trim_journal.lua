-- trim_journal: the recorder has written the oldest COUNT journal entries to MySQL;
-- drop them, and forget the fired markers of the jobs they recorded as fired.
-- KEYS[1] done list   KEYS[2] acked hash
-- ARGV[1] count   ARGV[2..] ids of jobs those entries recorded as fired
-- Returns the journal length left.

local done, acked = KEYS[1], KEYS[2]
redis.call('LTRIM', done, tonumber(ARGV[1]), -1)
for i = 2, #ARGV, 500 do
  redis.call('HDEL', acked, unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
return redis.call('LLEN', done)
