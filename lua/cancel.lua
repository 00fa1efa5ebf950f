-- cancel: remove a job that has not fired, so it never fires.
-- KEYS[1] delay zset   KEYS[2] inflight zset   KEYS[3] dead zset
-- KEYS[4] jobs hash    KEYS[5] attempts hash   KEYS[6] tomb zset   KEYS[7] acked hash
-- A job already in the ready list is cancelled by deleting its envelope: claim drops
-- ready entries without one, so the list is never searched.
-- ARGV[1] job id   ARGV[2] tombstone lifetime ms
-- Returns 1 removed; 0 not in Redis (a tombstone now refuses a late add of it, e.g. a
-- schedule() whose Redis step is still on its way); -2 in flight (being published now:
-- too late); -3 dead; -4 fired (its MySQL status may not be recorded yet).
--@include common

local delay, inflight, dead, jobs, attempts, tomb, acked =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id = ARGV[1]
local now = now_ms()
local v = redis.call('HGET', jobs, id)
if not v then
  if redis.call('HEXISTS', acked, id) == 1 then return -4 end
  redis.call('ZREMRANGEBYSCORE', tomb, '-inf', now - tonumber(ARGV[2]))
  redis.call('ZADD', tomb, now, id)
  return 0
end
if redis.call('ZSCORE', inflight, id) then return -2 end
if redis.call('ZSCORE', dead, id) then return -3 end
local seq = parse_envelope(v)
redis.call('ZREM', delay, seq .. id)
redis.call('HDEL', jobs, id)
redis.call('HDEL', attempts, id)
return 1
