-- Which Redis server this is, pulled in by "--@include incarnation". A Redis that
-- restarted from an older append-only file, or a replica promoted by a failover, may
-- lack its last writes (a cancel, a reschedule), and has a new run_id. Each slot's
-- watermark key holds "<run_id>|<ms>": the server it was last known complete on, and
-- the Redis time up to which it held every write (lua/watermark.lua). A slot whose
-- watermark names another server is not fired from until its owner has re-applied
-- MySQL's changes since that time (actors/rollback.py).
--@include contract

local function server_run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

-- The run_id and ms of a watermark value (nil, nil when there is none).
local function parse_watermark(v)
  if not v then return nil, nil end
  local run_id, ms = string.match(v, '^(%x+)|(%d+)$')
  return run_id, tonumber(ms)
end

-- nil when the slot's watermark names this server; else the ERROR_RESTARTED reply.
local function unverified_slot(watermark_key)
  local run_id = server_run_id()
  if parse_watermark(redis.call('GET', watermark_key)) == run_id then return nil end
  return redis.error_reply(ERROR_RESTARTED .. ' ' .. run_id)
end
