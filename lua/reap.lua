-- reap: in-flight jobs past their deadline (their node died or stalled) go back to the
-- delay zset with backoff, to the dead-letter set after max attempts, or expire when
-- the retry would come after due_ms + expires_after_ms.
-- KEYS[1] owner key   KEYS[2] inflight zset   KEYS[3] delay zset   KEYS[4] dead zset
-- KEYS[5] jobs hash   KEYS[6] attempts hash   KEYS[7] seq counter   KEYS[8] done list
-- KEYS[9] expired zset
-- ARGV[1] epoch   ARGV[2] limit   ARGV[3] backoff base ms   ARGV[4] backoff cap ms
-- ARGV[5] optional: reap only deadlines up to this ms (exactly_once: the jobs whose
-- transactions were looked up in the journal)
-- ARGV[6] optional, with ARGV[5]: the slot was just taken from a node whose session
-- ended, and the taker has claimed nothing yet, so every job in flight is the dead
-- node's: reap the deadlines up to ARGV[5] even past now (pass 0 as the backoff to
-- retry them at once), noting why
-- Returns {retried, dead, earliest_retry_due_ms or NO_TIME, more (1 when limit was
-- reached), expired}. Each retry is journalled STATUS_FIRING, each burial STATUS_DEAD,
-- each expiry STATUS_EXPIRED.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch.
--@include fence
--@include contract
--@include common

local K = {delay = KEYS[3], dead = KEYS[4], jobs = KEYS[5], attempts = KEYS[6],
           seq = KEYS[7], done = KEYS[8], expired = KEYS[9]}
local now = now_ms()
local limit, base, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local upto, note = now, 'in-flight deadline passed'
if ARGV[6] then
  upto, note = tonumber(ARGV[5]), "its owner's session ended while it had them in flight"
elseif ARGV[5] then
  upto = math.min(now, tonumber(ARGV[5]))
end
local timed_out = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', upto, 'LIMIT', 0, limit)
if #timed_out > 0 then redis.call('ZREM', KEYS[2], unpack(timed_out)) end
local retried, dead, expired, earliest = retry_or_bury_all(K, timed_out, now, base, cap, note)
local more = 0
if #timed_out == limit then more = 1 end
return {retried, dead, earliest, more, expired}
