-- uncancel: put back what lua/cancel.lua removed, when the cancel could not be recorded
-- in MySQL (unreachable before the UPDATE was sent): the job is waiting again as it was.
-- KEYS[1] tomb zset   KEYS[2] delay zset   KEYS[3] jobs hash   KEYS[4] attempts hash
-- KEYS[5] seq counter   KEYS[6] acked zset   KEYS[7] expired zset
-- ARGV[1] wake channel   ARGV[2] slot number   ARGV[3] job id
-- ARGV[4] the cancel's tombstone score   ARGV[5] the score it replaced (NO_TIME: none)
-- ARGV[6] the envelope it removed ('' for none: the job was not in Redis)
-- ARGV[7] its due ms (NO_TIME: it was in the ready list, so it is due now)
-- ARGV[8] its attempts
-- The job comes back with a new seq, so a ready-list entry of the old one stays stale.
-- Returns 1 when the tombstone was this cancel's and is taken back (the one it replaced
-- put back if unexpired) and the job is back unless Redis holds it again, fired it or
-- expired it meanwhile; 0 when the tombstone is no longer this cancel's (a later cancel
-- replaced it, the slot's owner restored the job, or it expired): nothing is changed.
--@include contract
--@include common

local tomb, delay, jobs, attempts, seq_key, acked, expired =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id = ARGV[3]
local mine, before = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local current = redis.call('ZSCORE', tomb, id)
if not current or tonumber(current) ~= mine then return 0 end
if before ~= NO_TIME and before > now then
  redis.call('ZADD', tomb, before, id)
else
  redis.call('ZREM', tomb, id)
end
local v = ARGV[6]
if v == '' or redis.call('HEXISTS', jobs, id) == 1 or redis.call('ZSCORE', acked, id)
    or redis.call('ZSCORE', expired, id) then
  return 1
end
local score = tonumber(ARGV[7])
if score == NO_TIME then score = now end
score = score_of(v, score)
local old_head = head_score(delay)
local seq = seq_hex(reserve_seq(seq_key, 1))
redis.call('HSET', jobs, id, rewrite_envelope(v, seq))
redis.call('ZADD', delay, score, member_of(seq, id))
if tonumber(ARGV[8]) > 0 then redis.call('HSET', attempts, id, ARGV[8]) end
wake_if_earlier(ARGV[1], ARGV[2], old_head, score)
return 1
