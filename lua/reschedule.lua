-- reschedule: give a job that has not fired a new due time.
-- KEYS[1] delay zset   KEYS[2] inflight zset   KEYS[3] dead zset   KEYS[4] jobs hash
-- KEYS[5] seq counter   KEYS[6] acked zset   KEYS[7] expired zset
-- A job already in the ready list gets a new seq, which makes its ready entry stale
-- (claim drops it), so the list is never searched.
-- ARGV[1] wake channel   ARGV[2] slot number   ARGV[3] job id   ARGV[4] new due ms
-- Returns {code, woke}: code CHANGE_CHANGED (moved); CHANGE_ABSENT (not in Redis);
-- CHANGE_IN_FLIGHT (too late); CHANGE_DEAD; CHANGE_FIRED or CHANGE_EXPIRED (its MySQL
-- status may not be recorded yet). woke is 1 when the owner was woken because the
-- slot's earliest due time moved earlier. The job's expiry, if any, moves with its due
-- time: it is expires_after_ms after the new one.
--@include contract
--@include common

local delay, inflight, dead, jobs, seq_key, acked, expired =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id, due = ARGV[3], ARGV[4]
local v = redis.call('HGET', jobs, id)
if not v then
  if redis.call('ZSCORE', acked, id) then return {CHANGE_FIRED, 0} end
  if redis.call('ZSCORE', expired, id) then return {CHANGE_EXPIRED, 0} end
  return {CHANGE_ABSENT, 0}
end
if redis.call('ZSCORE', inflight, id) then return {CHANGE_IN_FLIGHT, 0} end
if redis.call('ZSCORE', dead, id) then return {CHANGE_DEAD, 0} end
redis.call('ZREM', delay, member_of(envelope_seq(v), id))
local old_head = head_score(delay)
local new_seq = seq_hex(reserve_seq(seq_key, 1))
redis.call('HSET', jobs, id, rewrite_envelope(v, new_seq, due))
local score = score_of(v, due)  -- the job keeps its priority
redis.call('ZADD', delay, score, member_of(new_seq, id))
return {CHANGE_CHANGED, wake_if_earlier(ARGV[1], ARGV[2], old_head, score)}
