-- delayq migration 011: pausing recurring schedules (DelayClient.pause_recurring).
-- A paused schedule makes no ticks: nodes pass over it (actors/recurring.py), and the
-- ticks it had made ahead that were still waiting were cancelled when it was paused.
-- While paused, next_tick holds the first tick it may make once resumed (after any tick
-- that fired), and resume_recurring starts from that or from now, whichever is later:
-- the ticks of the pause are never made, whatever the schedule's missed policy.
-- NULL: not paused, as every schedule written before this migration.
-- A schedule's ticks are listed (GET /v1/recurring/{name}/ticks) by primary key ranges
-- of their job ids (cluster/model/tick_ids.py), which need no further index.
-- {recurring} is replaced by each shard's fully qualified schedule table name.

ALTER TABLE {recurring}
  ADD COLUMN paused_at DATETIME(3) NULL COMMENT 'when it was paused; NULL: not paused';
