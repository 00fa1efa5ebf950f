-- delayq migration 008: restored cancels.
-- A cancel removes the job from Redis (and sets a tombstone) before it records the cancel
-- in MySQL. When that second step fails, the node owning the job's slot puts the job back
-- into Redis from its row (actors/tombstones.py) and first sets restored_ms, a Redis
-- TIME just after the failed cancel's own: a cancel's UPDATE applies only to a row not
-- restored since its Redis step (restored_ms NULL or older), so a cancel whose MySQL
-- step lands after the job was restored changes nothing and is tried again by its
-- caller, which then removes the restored job. NULL: never restored. Producers of the
-- previous release cancel without that condition: upgrade them with the nodes.
-- {jobs} is replaced by each shard's fully qualified job table.

ALTER TABLE {jobs}
  ADD COLUMN restored_ms BIGINT NULL
    COMMENT 'Redis TIME ms just after a failed cancel whose job a node restored; NULL: never';
