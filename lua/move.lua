-- move: due jobs of one slot, delay zset -> ready list, in due order, at most LIMIT.
-- "Due" includes the next LEAD ms (the node's fire advance: it claims such jobs a few
-- ms early and publishes each at its due time by the Redis clock, actors/dispatcher.py).
-- The ready list gets the delay member itself (member_of(seq, job id)): claim checks
-- the seq against the envelope, so a cancel or reschedule never has to search the list.
-- KEYS[1] owner key   KEYS[2] delay zset   KEYS[3] ready list
-- ARGV[1] epoch   ARGV[2] limit (max jobs moved by this call)   ARGV[3] lead ms (>= 0)
-- Returns {moved, next_due_ms, now_ms, ready_length, first_due_ms}: next_due_ms is the
-- earliest remaining due time, now_ms when more are due already (moved == limit), or
-- NO_TIME when the zset is empty; first_due_ms is the due time of the most overdue job
-- moved (NO_TIME when none was), for the node's metrics.
-- "Due" is judged by the Redis server clock (TIME), never the caller's.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch.
--@include fence
--@include contract
--@include common

local delay, ready = KEYS[2], KEYS[3]
local limit = tonumber(ARGV[2])
local now = now_ms()
local members = redis.call('ZRANGEBYSCORE', delay, '-inf', now + tonumber(ARGV[3]), 'LIMIT', 0, limit)
local moved = #members
local first_due = NO_TIME
if moved > 0 then first_due = due_of(tonumber(redis.call('ZSCORE', delay, members[1]))) end
local chunk = 500
for i = 1, moved, chunk do
  local last = math.min(i + chunk - 1, moved)
  redis.call('RPUSH', ready, unpack(members, i, last))
  redis.call('ZREM', delay, unpack(members, i, last))
end
local next_due = NO_TIME
if moved == limit then
  next_due = now
else
  local head = head_score(delay)
  if head then next_due = due_of(head) end
end
return {moved, next_due, now, redis.call('LLEN', ready), first_due}
