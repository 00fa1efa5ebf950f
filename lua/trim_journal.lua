-- trim_journal: the recorder has written the oldest COUNT journal entries to MySQL;
-- drop them, and let the markers of the jobs they recorded as fired or expired expire
-- after RETENTION ms (until then a reconciler that read the row as pending before the
-- recorder wrote it still cannot re-add the job, and cancel and reschedule answer
-- CHANGE_FIRED or CHANGE_EXPIRED without asking MySQL).
-- KEYS[1] owner key   KEYS[2] done list   KEYS[3] acked zset   KEYS[4] expired zset
-- ARGV[1] epoch   ARGV[2] count   ARGV[3] retention ms
-- ARGV[4] the last of those entries as the recorder read it ('' when count is 0)
-- ARGV[5..] ids of jobs those entries recorded as fired or expired (each id's marker is
-- in one of the two zsets; ZADD XX touches only the one it is in)
-- Returns the journal length left, or JOURNAL_CHANGED when the journal's entry COUNT is not the one
-- read: nothing is trimmed. A Redis failover between the read and the trim can put in
-- place a replica that lacked the last entries read and has gained others since (acks
-- on the new master): trimming COUNT entries there would drop entries never recorded
-- and leave their jobs' markers for ever. Entries are unique (time and job id), so the
-- last one read still at its place means the first COUNT are those read (entries are
-- only appended, and trimmed by this script alone).
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch: a recorder that lost
-- the slot must not trim entries the new owner has not recorded yet.
--@include fence
--@include contract
--@include common

local done, acked, expired = KEYS[2], KEYS[3], KEYS[4]
local count = tonumber(ARGV[2])
if count > 0 and redis.call('LINDEX', done, count - 1) ~= ARGV[4] then return JOURNAL_CHANGED end
local now = now_ms()
redis.call('LTRIM', done, count, -1)
local expires = now + tonumber(ARGV[3])
for i = 5, #ARGV, 500 do
  local args = {}
  for j = i, math.min(i + 499, #ARGV) do
    args[#args + 1] = expires
    args[#args + 1] = ARGV[j]
  end
  redis.call('ZADD', acked, 'XX', unpack(args))
  redis.call('ZADD', expired, 'XX', unpack(args))
end
redis.call('ZREMRANGEBYSCORE', acked, '-inf', now)
redis.call('ZREMRANGEBYSCORE', expired, '-inf', now)
return redis.call('LLEN', done)
