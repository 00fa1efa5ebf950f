-- untomb: take back the tombstone a cancel set for a job MySQL had no waiting row of,
-- so that a schedule of that id right after is not refused (and fired late).
-- KEYS[1] tomb zset
-- ARGV[1] job id   ARGV[2] the cancel's tombstone score   ARGV[3] the score it replaced
-- (NO_TIME: none)
-- Returns 1 when the tombstone was taken back: removed, or the one it replaced put back
-- if that has not expired; 0 when the job's tombstone is no longer this cancel's (a
-- later cancel replaced it, or it expired), which is then left as it is.
--@include contract
--@include common

local tomb, id = KEYS[1], ARGV[1]
local mine, before = tonumber(ARGV[2]), tonumber(ARGV[3])
local current = redis.call('ZSCORE', tomb, id)
if not current or tonumber(current) ~= mine then return 0 end
if before ~= NO_TIME and before > now_ms() then
  redis.call('ZADD', tomb, before, id)
else
  redis.call('ZREM', tomb, id)
end
return 1
