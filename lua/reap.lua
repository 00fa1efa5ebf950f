-- reap: in-flight jobs past their deadline (their node died or stalled) go back to the
-- delay zset with backoff, or to the dead-letter set after max attempts.
-- KEYS[1] owner key   KEYS[2] inflight zset   KEYS[3] delay zset   KEYS[4] dead zset
-- KEYS[5] jobs hash   KEYS[6] attempts hash   KEYS[7] seq counter   KEYS[8] done list
-- ARGV[1] epoch   ARGV[2] limit   ARGV[3] backoff base ms   ARGV[4] backoff cap ms
-- Returns {retried, dead, earliest_retry_due_ms or NO_TIME, more (1 when limit was
-- reached)}. Each retry is journalled STATUS_FIRING, each burial STATUS_DEAD.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch.
--@include fence
--@include contract
--@include common

local K = {delay = KEYS[3], dead = KEYS[4], jobs = KEYS[5], attempts = KEYS[6],
           seq = KEYS[7], done = KEYS[8]}
local now = now_ms()
local limit, base, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
if #expired > 0 then redis.call('ZREM', KEYS[2], unpack(expired)) end
local retried, dead, earliest =
  retry_or_bury_all(K, expired, now, base, cap, 'in-flight deadline passed')
local more = 0
if #expired == limit then more = 1 end
return {retried, dead, earliest, more}
