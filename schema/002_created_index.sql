-- delayq migration 002: an index on the creation time of jobs.
-- The reconciler of every node re-checks, every recent_reconcile_ms, the pending rows of
-- its slots created in the last minute (actors/reconciler.py: a job whose Redis add was
-- lost after its MySQL commit fires within seconds instead of at the next full pass);
-- this index keeps that query to the recent rows. {jobs} is replaced by each shard's
-- fully qualified job table.

ALTER TABLE {jobs} ADD KEY idx_created (gmt_create);
