-- delayq migration 010: priority.
-- A job scheduled with a priority (0..1000, higher first) fires before the jobs of lower
-- priority due at the same millisecond: its Redis delay score is its due ms less
-- priority / 1024 (lua/includes/common.lua). 0 is every job's default, so the rows of
-- producers of the previous release read as priority 0. Nodes load the column with the
-- row, so a job re-added from MySQL (reconciler, loader, restore, dead-letter replay)
-- keeps its priority. Nodes of the previous release cannot read the Redis envelope of a
-- job with a priority: upgrade every node before producers give one.
-- {jobs} is replaced by each shard's fully qualified job table.

ALTER TABLE {jobs}
  ADD COLUMN priority SMALLINT UNSIGNED NOT NULL DEFAULT 0
    COMMENT '0..1000: among jobs due at the same ms, higher fires first';

-- A recurring schedule given a priority makes every tick a job with that priority.
-- {recurring} is replaced by each shard's fully qualified schedule table name.
ALTER TABLE {recurring}
  ADD COLUMN priority SMALLINT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'every tick job gets this priority (0..1000, higher fires first)';
