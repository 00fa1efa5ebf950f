-- Shared helpers, pulled into a script by the line "--@include common".
--
-- Stored envelope (the value in the slot's jobs hash): "<seq>|<fields>|<due_ms>|<tail>".
-- <fields> are the job's fields the scripts read, in header version 2 named
-- ("v=2;a=5;x=60000;p=10": max attempts, expires_after_ms, priority; FIELD_* names
-- them, a field at its default is left out), in version 1 (envelopes stored by earlier
-- releases) packed into one text ("5", "5:60000", "5p10", "5:60000p10"). envelope_field
-- reads both (cluster/model/envelope.py is the Python side).
-- seq is SEQ_DIGITS hex digits (seq_hex) and also prefixes the job's member in the
-- delay zset (member_of), so the member can be rebuilt from the envelope. A job with
-- expires_after is never published after due_ms + expires_after_ms (claim.lua,
-- retry_or_bury). The tail is opaque to the scripts; it is
-- "<topic>|<key murmur2>|<kafka key byte length>|<kafka key><record json>" (cluster/model/envelope.py),
-- or empty in a lean envelope: a job due beyond the payload lead (add.lua) until the
-- owner's filler loads its tail from MySQL (fill.lua). Every script that rewrites an
-- envelope keeps its fields and tail as they are (rewrite_envelope), and every delay
-- score is score_of(envelope, due) or field_score(fields, due): the due
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

-- A version-2 field's value by its name: ";<name>=<digits>" (the version comes first).
local FIELD_PATTERN = {
  [FIELD_MAX_ATTEMPTS] = ';' .. FIELD_MAX_ATTEMPTS .. '=(%d+)',
  [FIELD_EXPIRES_AFTER_MS] = ';' .. FIELD_EXPIRES_AFTER_MS .. '=(%d+)',
  [FIELD_PRIORITY] = ';' .. FIELD_PRIORITY .. '=(%d+)',
}

-- One field of an envelope's <fields> by its FIELD_* name, as a number; nil when
-- the job has none (no expiry, priority 0). The one reader of <fields>, every version.
local function envelope_field(fields, name)
  if string.byte(fields, 1) == 118 then  -- "v": version 2
    return tonumber(string.match(fields, FIELD_PATTERN[name]))
  end
  local attempts, expiry, priority = string.match(fields, '^(%d+):?(%d*)p?(%d*)$')
  if name == FIELD_MAX_ATTEMPTS then return tonumber(attempts) end
  if name == FIELD_EXPIRES_AFTER_MS then return tonumber(expiry) end
  return tonumber(priority)
end

-- Where an envelope's <fields> start: after the seq (SEQ_DIGITS) and its "|".
local FIELDS_AT = SEQ_DIGITS + 2

-- An envelope's <fields> alone (plain finds: it is read for every job claimed).
local function envelope_fields(v)
  return string.sub(v, FIELDS_AT, string.find(v, '|', FIELDS_AT, true) - 1)
end

-- An envelope's seq (hex), <fields>, due_ms (strings) and the index where its tail
-- starts.
local function envelope_header(v)
  local fields_end = string.find(v, '|', FIELDS_AT, true)
  local due_end = string.find(v, '|', fields_end + 1, true)
  return string.sub(v, 1, SEQ_DIGITS), string.sub(v, FIELDS_AT, fields_end - 1),
    string.sub(v, fields_end + 1, due_end - 1), due_end + 1
end

-- The envelope with a new seq (and due_ms, when given); its fields and tail kept.
local function rewrite_envelope(v, seq, due)
  local _, fields, old_due, body_at = envelope_header(v)
  return seq .. '|' .. fields .. '|' .. (due or old_due) .. '|' .. string.sub(v, body_at)
end

-- The delay score of a job due at due ms, with the priority its <fields> carry.
local function field_score(fields, due)
  local priority = envelope_field(fields, FIELD_PRIORITY)
  if priority then return tonumber(due) - priority / PRIORITY_SCALE end
  return tonumber(due)
end

-- field_score for a whole envelope.
local function score_of(v, due)
  return field_score(envelope_fields(v), due)
end

-- The due ms of a delay score (a priority makes it up to 1 ms lower).
local function due_of(score)
  return math.ceil(score)
end

-- The last ms at which a job may be published (due_ms + expires_after_ms), or nil when
-- it does not expire.
local function expires_at(v)
  local expiry = envelope_field(envelope_fields(v), FIELD_EXPIRES_AFTER_MS)
  if not expiry then return nil end
  local _, _, due = envelope_header(v)
  return tonumber(due) + expiry
end

-- Whether an envelope is lean: its header alone, its tail not loaded yet.
local function envelope_lean(v)
  local _, _, _, body_at = envelope_header(v)
  return body_at > string.len(v)
end

-- The seq an envelope carries: a delay member with another one is stale.
local function envelope_seq(v)
  return string.sub(v, 1, SEQ_DIGITS)
end

-- A journal entry for the MySQL recorder (actors/recorder.py reads it).
local function journal_entry(status, attempt, ms, id, note)
  return status .. '|' .. attempt .. '|' .. ms .. '|' .. string.len(id) .. '|' .. id .. (note or '')
end

local function journal(done_key, status, attempt, ms, id, note)
  redis.call('RPUSH', done_key, journal_entry(status, attempt, ms, id, note))
end

-- Variadic commands take at most this many arguments per call (Lua's stack for unpack).
local CHUNK = 1000

-- redis.call(command, key, items...) in calls of at most CHUNK items each (CHUNK is
-- even, so score-member and field-value pairs stay together).
local function call_chunked(command, key, items)
  for i = 1, #items, CHUNK do
    redis.call(command, key, unpack(items, i, math.min(i + CHUNK - 1, #items)))
  end
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
  local max_attempts = envelope_field(envelope_fields(v), FIELD_MAX_ATTEMPTS)
  local attempt = tonumber(redis.call('HGET', K.attempts, id) or '0')
  if attempt >= max_attempts then
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
