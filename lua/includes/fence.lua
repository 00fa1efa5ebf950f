-- Fencing, pulled in by "--@include fence" in every script that acts as a slot's
-- owner. KEYS[1] is the slot's owner key, holding the current ownership epoch (absent
-- means 0); ARGV[1] is the caller's epoch. A node whose ownership has moved on (its
-- ZooKeeper session expired, it was paused or partitioned) carries an old epoch and
-- is refused with the error ERROR_FENCED before it changes anything.
--@include contract
local current_epoch = tonumber(redis.call('GET', KEYS[1]) or '0')
if current_epoch ~= tonumber(ARGV[1]) then
  return redis.error_reply(
    ERROR_FENCED .. ' slot epoch is ' .. current_epoch .. ', caller has ' .. ARGV[1])
end
