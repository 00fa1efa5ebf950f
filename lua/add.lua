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
-- Read every job's tombstone, acked and expired marks and envelope in a few calls, then
-- write the new envelopes and delay members in one call each: per-call overhead, not
-- per-job work, was most of the cost.
local ids = {}
for i = 0, n - 1 do ids[i + 1] = ARGV[4 + i * 4] end
local envelopes, members, seen = {}, {}, {}
for from = 1, n, CHUNK do
  local last = math.min(from + CHUNK - 1, n)
  local tombs = redis.call('ZMSCORE', tomb, unpack(ids, from, last))
  local fired = redis.call('ZMSCORE', acked, unpack(ids, from, last))
  local gone = redis.call('ZMSCORE', expired, unpack(ids, from, last))
  local present = redis.call('HMGET', jobs, unpack(ids, from, last))
  for j = from, last do
    local i, at = j - 1, j - from + 1
    local id, due = ids[j], ARGV[5 + i * 4]
    local code = ADD_PRESENT
    if (tombs[at] and tonumber(tombs[at]) > now) or fired[at] or gone[at] then
      code = ADD_REFUSED
    elseif not present[at] and not seen[id] then
      seen[id] = true  -- the same id twice in one call: the second is present
      local seq = seq_hex(first_seq + i)
      local score = field_score(ARGV[6 + i * 4], due)
      local tail = ARGV[7 + i * 4]
      if lead > 0 and score > lean_after then tail = '' end
      envelopes[#envelopes + 1] = id
      envelopes[#envelopes + 1] = seq .. '|' .. ARGV[6 + i * 4] .. '|' .. due .. '|' .. tail
      members[#members + 1] = score
      members[#members + 1] = member_of(seq, id)
      if new_min == nil or score < new_min then new_min = score end
      code = ADD_ADDED
    end
    result[j + 1] = code
  end
end
call_chunked('HSET', jobs, envelopes)
call_chunked('ZADD', delay, members)
result[1] = wake_if_earlier(ARGV[1], ARGV[2], old_head, new_min)
return result
