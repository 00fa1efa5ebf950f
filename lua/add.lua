-- add: schedule jobs into one slot (idempotent per job id).
-- KEYS[1] delay zset   KEYS[2] jobs hash   KEYS[3] seq counter   KEYS[4] tomb zset
-- KEYS[5] acked zset   KEYS[6] expired zset
-- ARGV[1] wake channel   ARGV[2] slot number   ARGV[3] payload lead ms (0: none)
-- ARGV[4..] groups of 4: job_id, due_ms, fields, tail (cluster/model/envelope.py);
-- fields is the envelope header's <fields> as it is stored, in any version
-- (includes/common.lua: envelope_field; a priority lowers the delay score)
-- A job due more than the lead after now (Redis TIME) is stored lean: the envelope
-- header alone, empty tail. The owner's filler (lua/fill.lua) adds the tail once the
-- job comes within the lead; the dispatcher loads it from MySQL if it is still lean
-- when claimed.
-- Returns {woke, code_1, ..., code_n}: woke is 1 when the slot's earliest due time
-- moved earlier (the owner was woken by PUBLISH); each code is ADD_ADDED, ADD_PRESENT
-- (already scheduled: nothing changed) or ADD_REFUSED (the job was cancelled and its
-- tombstone has not expired, or it has just fired or expired and its MySQL status is not
-- recorded yet).
--@include contract
--@include common

local delay, jobs, seq_key, tomb, acked, expired =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local n = (#ARGV - 3) / 4
local now = now_ms()
local lead = tonumber(ARGV[3])
local lean_after = now + lead
local old_head = head_score(delay)
local first_seq = reserve_seq(seq_key, n)
local result = {0}
local new_min = nil
for i = 0, n - 1 do
  local id, due = ARGV[4 + i * 4], ARGV[5 + i * 4]
  local code = ADD_PRESENT
  local tomb_expires = redis.call('ZSCORE', tomb, id)
  if (tomb_expires and tonumber(tomb_expires) > now) or redis.call('ZSCORE', acked, id)
      or redis.call('ZSCORE', expired, id) then
    code = ADD_REFUSED
  elseif redis.call('HEXISTS', jobs, id) == 0 then
    local seq = seq_hex(first_seq + i)
    local score = field_score(ARGV[6 + i * 4], due)
    local tail = ARGV[7 + i * 4]
    if lead > 0 and score > lean_after then tail = '' end
    redis.call('HSET', jobs, id, seq .. '|' .. ARGV[6 + i * 4] .. '|' .. due .. '|' .. tail)
    redis.call('ZADD', delay, score, member_of(seq, id))
    if new_min == nil or score < new_min then new_min = score end
    code = ADD_ADDED
  end
  result[i + 2] = code
end
result[1] = wake_if_earlier(ARGV[1], ARGV[2], old_head, new_min)
return result
