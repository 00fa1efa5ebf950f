-- dead_replay: give dead jobs a new full set of attempts, due now.
-- KEYS[1] dead zset   KEYS[2] delay zset   KEYS[3] jobs hash   KEYS[4] attempts hash
-- KEYS[5] seq counter
-- ARGV[1] wake channel   ARGV[2] slot number   ARGV[3..] job ids
-- Returns the number replayed; ids not in the dead-letter set are skipped.
--@include common

local dead, delay, jobs, attempts, seq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_ms()
local old_head = head_score(delay)
local count = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', jobs, id)
  if v and redis.call('ZREM', dead, id) == 1 then
    local _, max_attempts, due, body_at = parse_envelope(v)
    local seq = seq_hex(reserve_seq(seq_key, 1))
    redis.call('HSET', jobs, id, seq .. '|' .. max_attempts .. '|' .. due .. '|' ..
      string.sub(v, body_at))
    redis.call('HDEL', attempts, id)
    redis.call('ZADD', delay, now, seq .. id)
    count = count + 1
  end
end
if count > 0 then wake_if_earlier(ARGV[1], ARGV[2], old_head, now) end
return count
