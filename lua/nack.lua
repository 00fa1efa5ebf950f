-- nack: publishing failed; retry each job with backoff, bury it after max attempts, or
-- expire it when its retry would come after due_ms + expires_after_ms.
-- KEYS[1] owner key   KEYS[2] inflight zset   KEYS[3] delay zset   KEYS[4] dead zset
-- KEYS[5] jobs hash   KEYS[6] attempts hash   KEYS[7] seq counter   KEYS[8] done list
-- KEYS[9] expired zset
-- ARGV[1] epoch   ARGV[2] backoff base ms   ARGV[3] backoff cap ms   ARGV[4] error text
-- ARGV[5..] job ids
-- Returns {retried, dead, earliest_retry_due_ms or NO_TIME, 0, expired} (the same shape
-- as reap's reply). Each retry is journalled STATUS_FIRING, each burial STATUS_DEAD,
-- each expiry STATUS_EXPIRED. Jobs no longer in flight here (reaped, acked or cancelled
-- meanwhile) are skipped. Error ERROR_FENCED when ARGV[1] is not the slot's current
-- epoch (the jobs then stay in flight for the new owner).
--@include fence
--@include contract
--@include common

local K = {delay = KEYS[3], dead = KEYS[4], jobs = KEYS[5], attempts = KEYS[6],
           seq = KEYS[7], done = KEYS[8], expired = KEYS[9]}
local now = now_ms()
local base, cap, note = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local ours = {}
for i = 5, #ARGV do
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then ours[#ours + 1] = ARGV[i] end
end
local retried, dead, expired, earliest = retry_or_bury_all(K, ours, now, base, cap, note)
return {retried, dead, earliest, 0, expired}
