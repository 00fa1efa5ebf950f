-- ack: jobs were published; forget them and journal STATUS_FIRED for the MySQL recorder.
-- KEYS[1] inflight zset   KEYS[2] delay zset   KEYS[3] jobs hash   KEYS[4] attempts hash
-- KEYS[5] done list   KEYS[6] acked zset   KEYS[7] dead zset   KEYS[8] expired zset
-- ARGV[1..] job ids
-- Returns the number of jobs acked. A job already acked or cancelled is skipped; a job
-- the reaper already put back for retry (or buried) is removed from the delay zset (or
-- the dead-letter set) too, since it did get published; if it is in the ready list by
-- now, that entry is left for claim to drop. A job the reaper expired meanwhile (its
-- retry would have come too late) did get published too: it is journalled fired with
-- attempt 0 (unknown here; the recorder keeps the attempts MySQL has).
--@include contract
--@include common

local inflight, delay, jobs, attempts, done, acked, dead, expired =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now = now_ms()
local count = 0
for _, id in ipairs(ARGV) do
  local v = redis.call('HGET', jobs, id)
  if v then
    if redis.call('ZREM', inflight, id) == 0 then
      local seq = envelope_seq(v)
      redis.call('ZREM', delay, member_of(seq, id))
      redis.call('ZREM', dead, id)
    end
    local attempt = redis.call('HGET', attempts, id) or '1'
    redis.call('HDEL', jobs, id)
    redis.call('HDEL', attempts, id)
    redis.call('ZADD', acked, '+inf', id)  -- until recorded (trim_journal)
    journal(done, STATUS_FIRED, attempt, now, id, '')
    count = count + 1
  elseif redis.call('ZREM', expired, id) == 1 then
    redis.call('ZADD', acked, '+inf', id)
    journal(done, STATUS_FIRED, 0, now, id, '')
    count = count + 1
  end
end
return count
