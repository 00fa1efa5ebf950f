-- claim: take ready jobs of one slot into flight, each with a deadline.
-- KEYS[1] owner key   KEYS[2] ready list   KEYS[3] inflight zset   KEYS[4] jobs hash
-- KEYS[5] attempts hash   KEYS[6] expired zset   KEYS[7] done list
-- ARGV[1] epoch   ARGV[2] max jobs to claim   ARGV[3] in-flight timeout ms
-- Returns {now_ms, expired, id_1, envelope_1, attempt_1, ...}. Ready entries are delay
-- members (member_of(seq, job id)); one whose job is gone (cancelled, acked) or whose
-- envelope carries another seq (rescheduled or retried since) is stale and dropped
-- silently. A job whose due_ms + expires_after_ms has passed by now (Redis TIME) is not
-- claimed: it expires (journalled STATUS_EXPIRED, see expire in includes/common.lua)
-- and is counted in `expired`, so a job claimed after its expiry is never published.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch.
--@include fence
--@include contract
--@include common

local ready, inflight, jobs, attempts = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K = {jobs = jobs, attempts = attempts, expired = KEYS[6], done = KEYS[7]}
local now = now_ms()
local members = redis.call('LPOP', ready, tonumber(ARGV[2]))
local result = {now, 0}
if not members then return result end
local deadline = now + tonumber(ARGV[3])
local zargs = {}
local expired = 0
for _, member in ipairs(members) do
  local id = member_id(member)
  local v = redis.call('HGET', jobs, id)
  if v and envelope_seq(v) == member_seq(member) then
    local last = expires_at(v)
    if last and now > last then
      local attempt = tonumber(redis.call('HGET', attempts, id) or '0')
      expire(K, id, attempt, now, string.format(
        'expired: not published by its due time + expires_after (claimed %d ms after that)',
        now - last))
      expired = expired + 1
    else
      zargs[#zargs + 1] = deadline
      zargs[#zargs + 1] = id
      result[#result + 1] = id
      result[#result + 1] = v
      result[#result + 1] = redis.call('HINCRBY', attempts, id, 1)
    end
  end
end
result[2] = expired
for i = 1, #zargs, 1000 do
  redis.call('ZADD', inflight, unpack(zargs, i, math.min(i + 999, #zargs)))
end
return result
