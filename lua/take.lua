-- take: a node became a slot's owner with a new epoch; from now on only that epoch
-- may move, claim, retry or trim in this slot.
-- KEYS[1] owner key
-- ARGV[1] new epoch
-- Returns 1 when the epoch is now current (also when it already was), 0 when the slot
-- already carries a newer epoch (this take is stale and must not act).

local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local epoch = tonumber(ARGV[1])
if current > epoch then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
