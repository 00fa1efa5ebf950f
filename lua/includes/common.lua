-- Shared helpers, pulled into a script by the line "--@include common".
--
-- Stored envelope (the value in the slot's jobs hash):
--   "<seq>|<max_attempts>|<due_ms>|<tail>", or for a job that expires
--   "<seq>|<max_attempts>:<expires_after_ms>|<due_ms>|<tail>", and for a job with a
--   priority above 0 the second field ends with "p<priority>" ("5p10", "5:60000p10").
-- seq is SEQ_DIGITS hex digits (seq_hex) and also prefixes the job's member in the
-- delay zset (member_of), so the member can be rebuilt from the envelope. A job with
-- expires_after is never published after due_ms + expires_after_ms (claim.lua,
-- retry_or_bury); the field rides with max_attempts so that the envelope of a job
-- without it is unchanged. The tail is opaque to the scripts; it is
-- "<topic>|<key murmur2>|<kafka key byte length>|<kafka key><record json>" (cluster/envelope.py),
-- or empty in a lean envelope: a job due beyond the payload lead (add.lua) until the
-- owner's filler loads its tail from MySQL (fill.lua). Every script that rewrites an
-- envelope keeps its tail, max attempts, expiry and priority as they are
-- (rewrite_envelope), and every delay score is score_of(envelope or field, due): the due
-- ms less priority / PRIORITY_SCALE, so among jobs due at the same ms the higher
-- priority comes first in the zset, and since that is less than 1 ms and Redis TIME is
-- a whole ms, a job is never due before its due ms. A score read back as a due time is
-- rounded up (due_of).
--
-- Journal entry (the slot's done list, drained into MySQL by the recorder):
--   "<status>|<attempt>|<ms>|<job id byte length>|<job id><note>"
-- status: STATUS_PENDING (replayed), STATUS_FIRING (retrying), STATUS_FIRED,
-- STATUS_DEAD or STATUS_EXPIRED. The length prefix keeps any job id safe.
--@include contract

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Reserve n consecutive sequence numbers; returns the first.
local function reserve_seq(seq_key, n)
  return redis.call('INCRBY', seq_key, n) - n + 1
end

-- Returns seq (hex), max_attempts, due_ms (strings), the index where the tail starts,
-- and expires_after_ms (a number; nil when the job does not expire).
local function parse_envelope(v)
  local _, header_end, seq, max_attempts, expiry, due =
    string.find(v, '^(%x+)|(%d+):?(%d*)p?%d*|(%-?%d+)|')
  return seq, max_attempts, due, header_end + 1, tonumber(expiry)
end

-- The envelope with a new seq (and due_ms, when given); max attempts, expiry and tail kept.
local function rewrite_envelope(v, seq, due)
  local _, header_end, attempts_field, old_due = string.find(v, '^%x+|([%d:p]+)|(%-?%d+)|')
  return seq .. '|' .. attempts_field .. '|' .. (due or old_due) .. '|' ..
    string.sub(v, header_end + 1)
end

-- The delay score of a job due at due ms, with the priority its envelope carries.
-- Cheap for a job without one: an anchored match that fails within the header.
local function score_of(v, due)
  local priority = string.match(v, '^%x+|[%d:]+p(%d+)|')
  if priority then return tonumber(due) - tonumber(priority) / PRIORITY_SCALE end
  return tonumber(due)
end

-- score_of for the envelope's second field alone, as add.lua and restore.lua get it.
local function field_score(field, due)
  local at = string.find(field, 'p', 1, true)
  if at then return tonumber(due) - tonumber(string.sub(field, at + 1)) / PRIORITY_SCALE end
  return tonumber(due)
end

-- The due ms of a delay score (a priority makes it up to 1 ms lower).
local function due_of(score)
  return math.ceil(score)
end

-- The last ms at which a job may be published (due_ms + expires_after_ms), or nil when
-- it does not expire. Cheap for the envelopes of jobs without expiry: an anchored match
-- that fails within the header.
local function expires_at(v)
  if not string.find(v, '^%x+|%d+:') then return nil end
  local _, _, due, _, expiry = parse_envelope(v)
  return tonumber(due) + expiry
end

-- Whether an envelope is lean: its header alone, its tail not loaded yet.
local function envelope_lean(v)
  local _, _, _, body_at = parse_envelope(v)
  return body_at > string.len(v)
end

-- The seq an envelope carries: a delay member with another one is stale.
local function envelope_seq(v)
  return string.sub(v, 1, SEQ_DIGITS)
end

local function journal(done_key, status, attempt, ms, id, note)
  redis.call('RPUSH', done_key,
    status .. '|' .. attempt .. '|' .. ms .. '|' .. string.len(id) .. '|' .. id .. (note or ''))
end

-- A job that may no longer be published: its envelope and attempts are forgotten, the
-- expired zset marks it (+inf until the recorder has written it to MySQL: add refuses
-- it, cancel and reschedule answer CHANGE_EXPIRED), and the journal says STATUS_EXPIRED.
-- K = {jobs, attempts, expired, done}.
local function expire(K, id, attempt, now, note)
  redis.call('HDEL', K.jobs, id)
  redis.call('HDEL', K.attempts, id)
  redis.call('ZADD', K.expired, '+inf', id)
  journal(K.done, STATUS_EXPIRED, attempt, now, id, note)
end

-- Current earliest score of a zset, or nil when empty.
local function head_score(zset_key)
  local head = redis.call('ZRANGE', zset_key, 0, 0, 'WITHSCORES')
  if head[2] then return tonumber(head[2]) end
  return nil
end

-- Tell the slot's owner (Redis pub/sub) that its earliest due time moved earlier.
local function wake_if_earlier(channel, slot, old_head, new_min)
  if new_min and (old_head == nil or new_min < old_head) then
    redis.call('PUBLISH', channel, slot .. ':' .. string.format('%d', due_of(new_min)))
    return 1
  end
  return 0
end

-- A failed or timed-out attempt: back to the delay zset with exponential backoff, or
-- to the dead-letter set once the job has used its max attempts, or expired when the
-- retry would come after due_ms + expires_after_ms (it could not be published in time).
-- K = {delay, dead, jobs, attempts, seq, done, expired}. Returns STATUS_FIRING and the
-- new due score, STATUS_DEAD, STATUS_EXPIRED, or nil when the job is gone (acked or
-- cancelled meanwhile).
local function retry_or_bury(K, id, now, base_ms, cap_ms, note)
  local v = redis.call('HGET', K.jobs, id)
  if not v then return nil end
  local _, max_attempts = parse_envelope(v)
  local attempt = tonumber(redis.call('HGET', K.attempts, id) or '0')
  if attempt >= tonumber(max_attempts) then
    redis.call('ZADD', K.dead, now, id)
    journal(K.done, STATUS_DEAD, attempt, now, id, note)
    return STATUS_DEAD
  end
  local backoff = base_ms * math.pow(2, math.max(attempt - 1, 0))
  if backoff > cap_ms then backoff = cap_ms end
  local score = now + backoff
  local last = expires_at(v)
  if last and score > last then
    expire(K, id, attempt, now, 'expired: its retry would come after due + expires_after; ' ..
      'last error: ' .. note)
    return STATUS_EXPIRED
  end
  local new_seq = seq_hex(reserve_seq(K.seq, 1))
  redis.call('HSET', K.jobs, id, rewrite_envelope(v, new_seq))
  redis.call('ZADD', K.delay, score_of(v, score), member_of(new_seq, id))
  journal(K.done, STATUS_FIRING, attempt, now, id, note)
  return STATUS_FIRING, score
end

-- retry_or_bury for jobs already taken out of the in-flight zset.
-- Returns retried, dead, expired, and the earliest new due score (NO_TIME when none was
-- retried).
local function retry_or_bury_all(K, ids, now, base_ms, cap_ms, note)
  local retried, dead, expired, earliest = 0, 0, 0, NO_TIME
  for _, id in ipairs(ids) do
    local outcome, score = retry_or_bury(K, id, now, base_ms, cap_ms, note)
    if outcome == STATUS_DEAD then
      dead = dead + 1
    elseif outcome == STATUS_EXPIRED then
      expired = expired + 1
    elseif outcome == STATUS_FIRING then
      retried = retried + 1
      if earliest == NO_TIME or score < earliest then earliest = score end
    end
  end
  return retried, dead, expired, earliest
end
