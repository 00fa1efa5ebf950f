-- The numbers the scripts share with Python and SQL, pulled into a script by the
-- line "--@include contract". Generated from cluster/model/contract.py by
--   make contract
-- do not edit by hand (tests/unit/test_contract.py compares the two).

-- JobStatus
local STATUS_PENDING = 0
local STATUS_FIRING = 1
local STATUS_FIRED = 2
local STATUS_CANCELLED = 3
local STATUS_DEAD = 4
local STATUS_EXPIRED = 5

-- AddCode
local ADD_ADDED = 1
local ADD_PRESENT = 0
local ADD_REFUSED = -1

-- ChangeCode
local CHANGE_CHANGED = 1
local CHANGE_ABSENT = 0
local CHANGE_IN_FLIGHT = -2
local CHANGE_DEAD = -3
local CHANGE_FIRED = -4
local CHANGE_EXPIRED = -5

-- TakeCode
local TAKE_TAKEN = 1
local TAKE_STALE = 0

-- ReplayCode
local REPLAY_REPLAYED = 1
local REPLAY_NOT_DEAD = 0

-- ErrorCode
local ERROR_FENCED = 'FENCED'
local ERROR_RESTARTED = 'RESTARTED'

-- EnvelopeField
local FIELD_VERSION = 'v'
local FIELD_MAX_ATTEMPTS = 'a'
local FIELD_EXPIRES_AFTER_MS = 'x'
local FIELD_PRIORITY = 'p'

-- A due time reported when there is none.
local NO_TIME = -1

-- trim_journal's answer when the journal is not the one read.
local JOURNAL_CHANGED = -1

-- A delay member is the seq (SEQ_DIGITS hex digits) followed by the job id.
local SEQ_DIGITS = 12
local function member_of(seq, id) return seq .. id end
local function member_seq(member) return string.sub(member, 1, SEQ_DIGITS) end
local function member_id(member) return string.sub(member, SEQ_DIGITS + 1) end
local function seq_hex(n) return string.format('%012x', n) end

-- A job's priority (0..PRIORITY_MAX) lowers its delay score by
-- priority / PRIORITY_SCALE (includes/common.lua: score_of).
local PRIORITY_MAX = 1000
local PRIORITY_SCALE = 1024
