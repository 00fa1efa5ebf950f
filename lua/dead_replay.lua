-- dead_replay: give dead jobs a new full set of attempts, due now. A job keeps its due
-- time and expiry: one replayed after its due time + expires_after expires when claimed.
-- KEYS[1] dead zset   KEYS[2] delay zset   KEYS[3] jobs hash   KEYS[4] attempts hash
-- KEYS[5] seq counter   KEYS[6] done list
-- ARGV[1] wake channel   ARGV[2] slot number   ARGV[3..] job ids (at most a few hundred)
-- Returns one code per job id: REPLAY_REPLAYED, or REPLAY_NOT_DEAD (not in the
-- dead-letter set: skipped).
-- Each replay is journalled (STATUS_PENDING, "replayed") after the job's STATUS_DEAD
-- entry, so the recorder sets the MySQL row back to pending even if it had not yet
-- recorded the death.
--@include contract
--@include common

local dead, delay, jobs, attempts, seq_key, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6]
local now = now_ms()
local old_head = head_score(delay)
local codes = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', jobs, id)
  local code = REPLAY_NOT_DEAD
  if v and redis.call('ZREM', dead, id) == 1 then
    local seq = seq_hex(reserve_seq(seq_key, 1))
    redis.call('HSET', jobs, id, rewrite_envelope(v, seq))
    redis.call('HDEL', attempts, id)
    redis.call('ZADD', delay, score_of(v, now), member_of(seq, id))
    journal(done, STATUS_PENDING, 0, now, id, 'replayed from the dead letters')
    code = REPLAY_REPLAYED
  end
  codes[#codes + 1] = code
end
wake_if_earlier(ARGV[1], ARGV[2], old_head, now)
return codes
