-- nack: publishing failed; retry each job with backoff, or bury it after max attempts.
-- KEYS[1] inflight zset   KEYS[2] delay zset   KEYS[3] dead zset   KEYS[4] jobs hash
-- KEYS[5] attempts hash   KEYS[6] seq counter   KEYS[7] done list
-- ARGV[1] backoff base ms   ARGV[2] backoff cap ms   ARGV[3] error text
-- ARGV[4..] job ids
-- Returns {retried, dead, earliest_retry_due_ms or -1}. Jobs no longer in flight here
-- (reaped, acked or cancelled meanwhile) are skipped.
--@include common

local K = {delay = KEYS[2], dead = KEYS[3], jobs = KEYS[4], attempts = KEYS[5],
           seq = KEYS[6], done = KEYS[7]}
local now = now_ms()
local base, cap, note = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local retried, dead, earliest = 0, 0, -1
for i = 4, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    local score = retry_or_bury(K, id, now, base, cap, note)
    if score == -1 then
      dead = dead + 1
    elseif score then
      retried = retried + 1
      if earliest == -1 or score < earliest then earliest = score end
    end
  end
end
return {retried, dead, earliest}
