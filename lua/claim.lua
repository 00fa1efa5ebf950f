-- claim: take ready jobs of one slot into flight, each with a deadline.
-- KEYS[1] owner key   KEYS[2] ready list   KEYS[3] inflight zset   KEYS[4] jobs hash
-- KEYS[5] attempts hash   KEYS[6] expired zset   KEYS[7] done list   KEYS[8] watermark
-- ARGV[1] epoch   ARGV[2] max jobs to claim   ARGV[3] in-flight timeout ms
-- ARGV[4] (optional) '1': refuse the slot unless its watermark names this server
-- ARGV[5] (optional) the latest deadline of this slot's claims whose reply reached the
-- caller: in-flight jobs with a later one were claimed by a call whose reply was lost
-- (a timeout, a dropped connection, a client retrying the call), and are handed out
-- again first (actors/claims.py).
-- Returns {now_ms, expired, reclaimed, id_1, envelope_1, attempt_1, ...}: the jobs of
-- a lost claim first (`reclaimed` of them, with the attempt that claim counted), then
-- new ones. Ready entries are delay members (member_of(seq, job id)); one whose job is
-- gone (cancelled, acked) or whose envelope carries another seq (rescheduled or retried
-- since) is stale and dropped silently. A job whose due_ms + expires_after_ms has passed
-- by now (Redis TIME) is not claimed: it expires (journalled STATUS_EXPIRED, see expire
-- in includes/common.lua) and is counted in `expired`, so a job claimed after its
-- expiry is never published. Every job returned gets the deadline now + ARGV[3], or
-- ARGV[5] + 1 if that is later.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch; ERROR_RESTARTED
-- (with ARGV[4]) when the slot's watermark names another server, or none
-- (includes/incarnation.lua): nothing is claimed from a Redis that may have come back
-- without its last writes before the slot's owner made it agree with MySQL.
--@include fence
--@include contract
--@include common
--@include incarnation

if ARGV[4] == '1' then
  local refused = unverified_slot(KEYS[8])
  if refused then return refused end
end

local ready, inflight, jobs, attempts = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K = {jobs = jobs, attempts = attempts, expired = KEYS[6], done = KEYS[7]}
local now = now_ms()
local deadline = now + tonumber(ARGV[3])
if ARGV[5] and ARGV[5] ~= '' then
  -- Above the last one seen even within the same millisecond, so that this claim's
  -- jobs are told apart from that one's should this reply be lost too.
  deadline = math.max(deadline, tonumber(ARGV[5]) + 1)
end
local result = {now, 0, 0}
local zargs = {}
local seen = {}  -- each job is handed out once per call

-- Whether a job may still be published; expires it otherwise.
local function publishable(id, v, attempt, how)
  local last = expires_at(v)
  if last and now > last then
    expire(K, id, attempt, now, string.format(
      'expired: not published by its due time + expires_after (%s %d ms after that)',
      how, now - last))
    result[2] = result[2] + 1
    return false
  end
  return true
end

if ARGV[5] and ARGV[5] ~= '' then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', inflight, '(' .. ARGV[5], '+inf')) do
    local v = redis.call('HGET', jobs, id)
    local attempt = tonumber(redis.call('HGET', attempts, id) or '1')
    if v and publishable(id, v, attempt, 'reclaimed') then
      seen[id] = true
      zargs[#zargs + 1] = deadline
      zargs[#zargs + 1] = id
      result[#result + 1] = id
      result[#result + 1] = v
      result[#result + 1] = attempt
      result[3] = result[3] + 1
    else
      redis.call('ZREM', inflight, id)
    end
  end
end

-- The envelopes and attempts of the popped jobs in a few calls, the new attempts and
-- deadlines in one call each: per-call overhead, not per-job work, was most of the cost.
local members = redis.call('LPOP', ready, tonumber(ARGV[2])) or {}
local ids, counted = {}, {}
for k, member in ipairs(members) do ids[k] = member_id(member) end
for i = 1, #ids, CHUNK do
  local last = math.min(i + CHUNK - 1, #ids)
  local values = redis.call('HMGET', jobs, unpack(ids, i, last))
  local tries = redis.call('HMGET', attempts, unpack(ids, i, last))
  for j = i, last do
    local id, v = ids[j], values[j - i + 1]
    if v and not seen[id] and envelope_seq(v) == member_seq(members[j]) then
      seen[id] = true
      local attempt = tonumber(tries[j - i + 1] or '0')
      if publishable(id, v, attempt, 'claimed') then
        zargs[#zargs + 1] = deadline
        zargs[#zargs + 1] = id
        counted[#counted + 1] = id
        counted[#counted + 1] = attempt + 1
        result[#result + 1] = id
        result[#result + 1] = v
        result[#result + 1] = attempt + 1
      end
    end
  end
end
call_chunked('HSET', attempts, counted)
call_chunked('ZADD', inflight, zargs)
return result
