-- delayq migration 007: expiry for recurring schedules.
-- A schedule given expires_after (DelayClient.schedule_recurring) makes every tick a job
-- with that expires_after_ms (migration 006): a tick that could not be published by its
-- time plus that long (nodes or the broker down) ends expired rather than firing late.
-- NULL: its ticks never expire, as every schedule written before this migration.
-- {recurring} is replaced by each shard's fully qualified schedule table name.

ALTER TABLE {recurring}
  ADD COLUMN expires_after_ms BIGINT UNSIGNED NULL
    COMMENT 'every tick job gets this expires_after_ms; NULL: ticks never expire';
