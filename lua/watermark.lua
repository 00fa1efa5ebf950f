-- watermark: a slot's record of the Redis server it is known complete on, and of the
-- Redis time up to which that server held every write of the slot: "<run_id>|<ms>".
-- Its owner refreshes it every second; claims refuse a slot whose watermark names
-- another server (includes/incarnation.lua), until the owner has re-applied MySQL's
-- changes since the recorded time and verified it (actors/rollback.py).
-- KEYS[1] the slot's watermark key
-- ARGV[1] 'refresh' or 'verify'   ARGV[2] (verify) the run_id the slot was corrected on
-- refresh: when the watermark names this server, writes now; returns {1, run_id, ms
--   it held}; else writes nothing and returns {0, run_id, ms it holds or -1 if none}.
-- verify: when this server's run_id is ARGV[2] (it did not restart again meanwhile),
--   writes "<run_id>|<now>" and returns {1, run_id, now}; else {0, run_id, -1}.
--@include contract
--@include common
--@include incarnation

local key = KEYS[1]
local run_id = server_run_id()
local now = now_ms()
if ARGV[1] == 'verify' then
  if run_id ~= ARGV[2] then return {0, run_id, -1} end
  redis.call('SET', key, run_id .. '|' .. now)
  return {1, run_id, now}
end
local stored, ms = parse_watermark(redis.call('GET', key))
if stored ~= run_id then return {0, run_id, ms or -1} end
redis.call('SET', key, run_id .. '|' .. now)
return {1, run_id, ms}
