-- claim: take ready jobs of one slot into flight, each with a deadline.
-- KEYS[1] owner key   KEYS[2] ready list   KEYS[3] inflight zset   KEYS[4] jobs hash
-- KEYS[5] attempts hash
-- ARGV[1] epoch   ARGV[2] max jobs to claim   ARGV[3] in-flight timeout ms
-- Returns {now_ms, id_1, envelope_1, attempt_1, ...}. Ready entries are delay members
-- (member_of(seq, job id)); one whose job is gone (cancelled, acked) or whose envelope
-- carries another seq (rescheduled or retried since) is stale and dropped silently.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch.
--@include fence
--@include contract
--@include common

local ready, inflight, jobs, attempts = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_ms()
local members = redis.call('LPOP', ready, tonumber(ARGV[2]))
local result = {now}
if not members then return result end
local deadline = now + tonumber(ARGV[3])
local zargs = {}
for _, member in ipairs(members) do
  local id = member_id(member)
  local v = redis.call('HGET', jobs, id)
  if v and envelope_seq(v) == member_seq(member) then
    zargs[#zargs + 1] = deadline
    zargs[#zargs + 1] = id
    result[#result + 1] = id
    result[#result + 1] = v
    result[#result + 1] = redis.call('HINCRBY', attempts, id, 1)
  end
end
for i = 1, #zargs, 1000 do
  redis.call('ZADD', inflight, unpack(zargs, i, math.min(i + 999, #zargs)))
end
return result
