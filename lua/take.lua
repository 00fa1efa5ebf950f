-- take: a node became a slot's owner with a new epoch; from now on only that epoch
-- may move, claim, retry or trim in this slot.
-- KEYS[1] owner key
-- ARGV[1] new epoch
-- Returns TAKE_TAKEN when the epoch is now current, TAKE_STALE when the slot already
-- carries this epoch or a newer one (this take must not act). An epoch is used by one
-- take only: refusing an equal one keeps a fencing token from ever being issued twice,
-- whatever happened to the slot's znode in ZooKeeper (actors/membership.py computes
-- each epoch above the one stored here).
--@include contract

local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local epoch = tonumber(ARGV[1])
if current >= epoch then return TAKE_STALE end
redis.call('SET', KEYS[1], ARGV[1])
return TAKE_TAKEN
