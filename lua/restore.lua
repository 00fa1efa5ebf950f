-- restore: the slot owner's recovery of cancels that failed half-way. A cancel removes
-- the job and sets a tombstone (lua/cancel.lua) before MySQL records it; when that
-- second step fails and the caller could not put the job back, MySQL still calls the
-- job waiting while Redis lacks it. The owner (actors/tombstones.py) finds such
-- tombstones once they are older than a grace, marks the rows in MySQL (restored_ms,
-- which makes a late UPDATE of that cancel change nothing) and runs this.
-- KEYS[1] owner key   KEYS[2] tomb zset   KEYS[3] delay zset   KEYS[4] jobs hash
-- KEYS[5] seq counter   KEYS[6] acked zset   KEYS[7] expired zset
-- ARGV[1] epoch   ARGV[2] wake channel   ARGV[3] slot number   ARGV[4] payload lead ms
-- ARGV[5] tombstone lifetime ms   ARGV[6] grace ms
-- ARGV[7..] groups of 6: job id, tombstone score read, add (1: the job is due within the
-- Redis horizon, add it; 0: remove the tombstone only), due ms, envelope fields, tail
-- (as for lua/add.lua).
-- Per job, only while the tombstone still has the score read and was set more than the
-- grace ago (score - lifetime + grace <= Redis TIME): the tombstone goes, and the job is
-- added unless Redis holds it, fired it or expired it.
-- Returns {woke, code_1, ..., code_n}: code 1 restored (added), 2 tombstone removed only,
-- 3 too young (unchanged), 0 the tombstone is not the one read (unchanged).
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch.
--@include fence
--@include contract
--@include common

local tomb, delay, jobs, seq_key, acked, expired =
  KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local now = now_ms()
local lead, lifetime, grace = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local old_head = head_score(delay)
local result = {0}
local new_min = nil
for i = 7, #ARGV, 6 do
  local id, read = ARGV[i], tonumber(ARGV[i + 1])
  local current = redis.call('ZSCORE', tomb, id)
  local code = 0
  if current and tonumber(current) == read then
    if read - lifetime + grace > now then
      code = 3
    else
      redis.call('ZREM', tomb, id)
      code = 2
      if ARGV[i + 2] == '1' and redis.call('HEXISTS', jobs, id) == 0
          and not redis.call('ZSCORE', acked, id) and not redis.call('ZSCORE', expired, id) then
        local due = ARGV[i + 3]
        local score = field_score(ARGV[i + 4], due)
        local tail = ARGV[i + 5]
        if lead > 0 and score > now + lead then tail = '' end
        local seq = seq_hex(reserve_seq(seq_key, 1))
        redis.call('HSET', jobs, id, seq .. '|' .. ARGV[i + 4] .. '|' .. due .. '|' .. tail)
        redis.call('ZADD', delay, score, member_of(seq, id))
        if new_min == nil or score < new_min then new_min = score end
        code = 1
      end
    end
  end
  result[#result + 1] = code
end
result[1] = wake_if_earlier(ARGV[2], ARGV[3], old_head, new_min)
return result
