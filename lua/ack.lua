-- ack: jobs were published; forget them and journal STATUS_FIRED for the MySQL recorder.
-- KEYS[1] inflight zset   KEYS[2] delay zset   KEYS[3] jobs hash   KEYS[4] attempts hash
-- KEYS[5] done list   KEYS[6] acked zset   KEYS[7] dead zset   KEYS[8] expired zset
-- ARGV[1..] job ids
-- Returns the number of jobs acked. A job already acked or cancelled is skipped; a job
-- the reaper already put back for retry (or buried) is removed from the delay zset (or
-- the dead-letter set) too, since it did get published; if it is in the ready list by
-- now, that entry is left for claim to drop. A job the reaper expired meanwhile (its
-- retry would have come too late) did get published too: it is journalled fired with
-- attempt 0 (unknown here; the recorder keeps the attempts MySQL has).
--@include contract
--@include common

local inflight, delay, jobs, attempts, done, acked, dead, expired =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now = now_ms()
-- Each job once, in the order given.
local ids, seen = {}, {}
for _, id in ipairs(ARGV) do
  if not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id
  end
end
-- Read every job's envelope, in-flight entry and attempt in a few calls, then change
-- the keys in one call each: per-call overhead, not per-job work, was most of the cost.
local forget, marks, entries = {}, {}, {}
for i = 1, #ids, CHUNK do
  local last = math.min(i + CHUNK - 1, #ids)
  local values = redis.call('HMGET', jobs, unpack(ids, i, last))
  local deadlines = redis.call('ZMSCORE', inflight, unpack(ids, i, last))
  local tries = redis.call('HMGET', attempts, unpack(ids, i, last))
  for j = i, last do
    local id, v = ids[j], values[j - i + 1]
    if v then
      if not deadlines[j - i + 1] then
        redis.call('ZREM', delay, member_of(envelope_seq(v), id))
        redis.call('ZREM', dead, id)
      end
      forget[#forget + 1] = id
      marks[#marks + 1] = '+inf'  -- in the acked zset until recorded (trim_journal)
      marks[#marks + 1] = id
      entries[#entries + 1] = journal_entry(STATUS_FIRED, tries[j - i + 1] or '1', now, id, '')
    elseif redis.call('ZREM', expired, id) == 1 then
      marks[#marks + 1] = '+inf'
      marks[#marks + 1] = id
      entries[#entries + 1] = journal_entry(STATUS_FIRED, 0, now, id, '')
    end
  end
end
call_chunked('ZREM', inflight, forget)
call_chunked('HDEL', jobs, forget)
call_chunked('HDEL', attempts, forget)
call_chunked('ZADD', acked, marks)
call_chunked('RPUSH', done, entries)
return #entries
