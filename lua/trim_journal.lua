-- trim_journal: the recorder has written the oldest COUNT journal entries to MySQL;
-- drop them, and forget the fired markers of the jobs they recorded as fired.
-- KEYS[1] owner key   KEYS[2] done list   KEYS[3] acked hash
-- ARGV[1] epoch   ARGV[2] count   ARGV[3..] ids of jobs those entries recorded as fired
-- Returns the journal length left. Error FENCED when ARGV[1] is not the slot's current
-- epoch: a recorder that lost the slot must not trim entries the new owner has not
-- recorded yet.
--@include fence

local done, acked = KEYS[2], KEYS[3]
redis.call('LTRIM', done, tonumber(ARGV[2]), -1)
for i = 3, #ARGV, 500 do
  redis.call('HDEL', acked, unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
return redis.call('LLEN', done)
