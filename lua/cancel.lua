-- cancel: remove a job that has not fired, so it never fires.
-- KEYS[1] delay zset   KEYS[2] inflight zset   KEYS[3] dead zset
-- KEYS[4] jobs hash    KEYS[5] attempts hash   KEYS[6] tomb zset   KEYS[7] acked zset
-- KEYS[8] expired zset
-- A job already in the ready list is cancelled by deleting its envelope: claim drops
-- ready entries without one, so the list is never searched.
-- ARGV[1] job id   ARGV[2] tombstone lifetime ms
-- Returns {code, tomb, before, now, envelope, score, attempts}. code: CHANGE_CHANGED
-- (removed); CHANGE_ABSENT (not in Redis); CHANGE_IN_FLIGHT (being published now: too
-- late); CHANGE_DEAD; CHANGE_FIRED or CHANGE_EXPIRED (its MySQL status may not be
-- recorded yet). On CHANGE_CHANGED and CHANGE_ABSENT a tombstone (scored with its
-- expiry time) refuses any add of the job for the lifetime given: a schedule() whose
-- Redis step is still on its way, or the reconciler re-adding a row it read before the
-- cancel. Should the caller's cancel fail before MySQL recorded it, the owner of the
-- slot finds the tombstone of a job MySQL still calls waiting and restores the job
-- (lua/restore.lua, actors/tombstones.py).
-- tomb is the tombstone's score, made higher than any earlier one of the job so that it
-- names this cancel's tombstone; before is the unexpired score it replaced. Both are
-- NO_TIME when no tombstone was set. lua/untomb.lua takes them back. now is Redis TIME
-- (ms): the caller records the cancel in MySQL only if no restore of the job came after
-- it. On CHANGE_CHANGED, envelope, score (its place in the delay zset; NO_TIME when it
-- was in the ready list) and attempts are what was removed, so lua/uncancel.lua can
-- put it back; elsewhere they are '', NO_TIME and 0.
--@include contract
--@include common

local delay, inflight, dead, jobs, attempts, tomb, acked, expired =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local id = ARGV[1]
local now = now_ms()
local v = redis.call('HGET', jobs, id)
redis.call('ZREMRANGEBYSCORE', tomb, '-inf', now)
local before = tonumber(redis.call('ZSCORE', tomb, id) or NO_TIME)
local expires = math.max(now + tonumber(ARGV[2]), before + 1)
if not v then
  if redis.call('ZSCORE', acked, id) then
    return {CHANGE_FIRED, NO_TIME, NO_TIME, now, '', NO_TIME, 0}
  end
  if redis.call('ZSCORE', expired, id) then
    return {CHANGE_EXPIRED, NO_TIME, NO_TIME, now, '', NO_TIME, 0}
  end
  redis.call('ZADD', tomb, expires, id)
  return {CHANGE_ABSENT, expires, before, now, '', NO_TIME, 0}
end
if redis.call('ZSCORE', inflight, id) then
  return {CHANGE_IN_FLIGHT, NO_TIME, NO_TIME, now, '', NO_TIME, 0}
end
if redis.call('ZSCORE', dead, id) then
  return {CHANGE_DEAD, NO_TIME, NO_TIME, now, '', NO_TIME, 0}
end
local seq = envelope_seq(v)
local member = member_of(seq, id)
local score = redis.call('ZSCORE', delay, member)
local tried = tonumber(redis.call('HGET', attempts, id) or '0')
redis.call('ZREM', delay, member)
redis.call('HDEL', jobs, id)
redis.call('HDEL', attempts, id)
redis.call('ZADD', tomb, expires, id)
-- The job's due ms (its score rounded up past its priority), as a string: uncancel.lua
-- makes the score again from it and the envelope.
if score then score = string.format('%d', due_of(tonumber(score))) end
return {CHANGE_CHANGED, expires, before, now, v, score or tostring(NO_TIME), tried}
