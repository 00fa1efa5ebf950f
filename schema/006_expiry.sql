-- delayq migration 006: expiry.
-- A job scheduled with expires_after is never published after its due time plus that
-- long; if it could not be published by then (nodes or the broker down), it ends with
-- status 5, expired (the claim and retry scripts decide, lua/claim.lua and
-- lua/includes/common.lua; the recorder writes it here). expires_after_ms is NULL for
-- a job that does not expire; nodes load it with the row, so a job re-added from MySQL
-- or loaded lean keeps its expiry. Producers of the previous release schedule jobs
-- without it (NULL). Nodes of the previous release cannot read the Redis envelope of a
-- job that expires: upgrade every node before producers give expires_after.
-- The second statement only names the new status in the column's comment.
-- {jobs} is replaced by each shard's fully qualified job table.

ALTER TABLE {jobs}
  ADD COLUMN expires_after_ms BIGINT UNSIGNED NULL
    COMMENT 'not published after action_time + this many ms (then status 5); NULL: never expires';

ALTER TABLE {jobs}
  MODIFY COLUMN status TINYINT NOT NULL DEFAULT 0
    COMMENT '0 pending, 1 firing (retrying), 2 fired, 3 cancelled, 4 dead, 5 expired';
