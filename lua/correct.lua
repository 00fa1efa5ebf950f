-- correct: make a slot agree with MySQL about jobs MySQL changed since the slot's
-- watermark, after this Redis came back without its last writes (a restart from an
-- older append-only file, a replica promoted before it had them).
-- KEYS[1] owner key   KEYS[2] delay zset   KEYS[3] inflight zset   KEYS[4] jobs hash
-- KEYS[5] attempts hash   KEYS[6] tomb zset   KEYS[7] acked zset
-- ARGV[1] epoch   ARGV[2] marker lifetime ms   ARGV[3..] pairs: job id, then what MySQL
-- says: 'c' cancelled, 'f' fired, 'w' waiting (pending or retrying) with a due time
-- changed since (rescheduled)
-- 'c' and 'f': a job Redis still holds is removed (delay zset, in-flight entry,
-- envelope, attempts; a ready entry without its envelope is dropped by claim) and
-- marked for the marker lifetime, with a tombstone or a fired marker, so that no add
-- brings it back. Nothing in Redis can be publishing it: claims of the slot are
-- refused until the owner has verified it (includes/incarnation.lua).
-- 'w': a stale in-flight entry is removed (MySQL's reschedule was accepted, so the job
-- was not in flight then), so that the caller's reschedule script can move the job.
-- Returns how many jobs were removed or taken out of flight.
--@include fence
--@include contract
--@include common

local delay, inflight, jobs, attempts, tomb, acked =
  KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local until_ms = now_ms() + tonumber(ARGV[2])
local changed = 0
for i = 3, #ARGV, 2 do
  local id, kind = ARGV[i], ARGV[i + 1]
  local v = redis.call('HGET', jobs, id)
  if kind == 'w' then
    changed = changed + redis.call('ZREM', inflight, id)
  elseif v then
    redis.call('ZREM', delay, member_of(envelope_seq(v), id))
    redis.call('ZREM', inflight, id)
    redis.call('HDEL', jobs, id)
    redis.call('HDEL', attempts, id)
    redis.call('ZADD', kind == 'c' and tomb or acked, 'GT', until_ms, id)
    changed = changed + 1
  end
end
return changed
