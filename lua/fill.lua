-- fill: give lean envelopes of one slot their tail, loaded from MySQL by the owner's
-- filler shortly before the jobs are due (add.lua stores far jobs lean).
-- KEYS[1] owner key   KEYS[2] jobs hash
-- ARGV[1] epoch   ARGV[2..] groups of 3: job id, seq (hex) of the envelope read, tail
-- A job is filled only while its envelope exists, is still lean and still carries that
-- seq: one cancelled, fired, rescheduled or retried since it was read is left alone
-- (the dispatcher loads the tail of a job still lean when it claims it).
-- Returns the number of envelopes filled.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch.
--@include fence
--@include contract
--@include common

local jobs = KEYS[2]
local filled = 0
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local v = redis.call('HGET', jobs, id)
  if v and envelope_seq(v) == ARGV[i + 1] and envelope_lean(v) then
    redis.call('HSET', jobs, id, v .. ARGV[i + 2])
    filled = filled + 1
  end
end
return filled
