-- release: claimed jobs whose record could not be built (their envelope is lean and
-- MySQL, which holds the rest, did not answer) go back to the delay zset, due again
-- after a pause, without using up an attempt and without a journal entry: nothing was
-- tried. A job that expires meanwhile expires when it is claimed again.
-- KEYS[1] owner key   KEYS[2] inflight zset   KEYS[3] delay zset   KEYS[4] jobs hash
-- KEYS[5] attempts hash   KEYS[6] seq counter
-- ARGV[1] epoch   ARGV[2] pause ms   ARGV[3..] job ids
-- Returns {released, due_ms or NO_TIME when none was released}. Jobs no longer in
-- flight here (reaped, acked or cancelled meanwhile) are skipped.
-- Error ERROR_FENCED when ARGV[1] is not the slot's current epoch (the jobs then stay
-- in flight for the new owner).
--@include fence
--@include contract
--@include common

local inflight, delay, jobs, attempts, seq_key = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local due = now_ms() + tonumber(ARGV[2])
local released = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', jobs, id)
  if redis.call('ZREM', inflight, id) == 1 and v then
    -- Undo the claim's count: the attempt never happened.
    if redis.call('HINCRBY', attempts, id, -1) <= 0 then redis.call('HDEL', attempts, id) end
    -- A new seq, as for a retry: the member is new in the delay zset.
    local seq = seq_hex(reserve_seq(seq_key, 1))
    redis.call('HSET', jobs, id, rewrite_envelope(v, seq))
    redis.call('ZADD', delay, score_of(v, due), member_of(seq, id))
    released = released + 1
  end
end
if released == 0 then return {0, NO_TIME} end
return {released, due}
