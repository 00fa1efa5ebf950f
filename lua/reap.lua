-- reap: in-flight jobs past their deadline (their node died or stalled) go back to the
-- delay zset with backoff, or to the dead-letter set after max attempts.
-- KEYS[1] inflight zset   KEYS[2] delay zset   KEYS[3] dead zset   KEYS[4] jobs hash
-- KEYS[5] attempts hash   KEYS[6] seq counter   KEYS[7] done list
-- ARGV[1] limit   ARGV[2] backoff base ms   ARGV[3] backoff cap ms
-- Returns {retried, dead, earliest_retry_due_ms or -1, more (1 when limit was reached)}.
--@include common

local K = {delay = KEYS[2], dead = KEYS[3], jobs = KEYS[4], attempts = KEYS[5],
           seq = KEYS[6], done = KEYS[7]}
local now = now_ms()
local limit, base, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local retried, dead, earliest = 0, 0, -1
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local score = retry_or_bury(K, id, now, base, cap, 'in-flight deadline passed')
  if score == -1 then
    dead = dead + 1
  elseif score then
    retried = retried + 1
    if earliest == -1 or score < earliest then earliest = score end
  end
end
local more = 0
if #expired == limit then more = 1 end
return {retried, dead, earliest, more}
