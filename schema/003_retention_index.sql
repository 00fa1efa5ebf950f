-- delayq migration 003: an index for retention.
-- The node owning a slot deletes, every retention_interval_s, the fired and cancelled
-- jobs of its slots last changed more than retention_days ago, with their history
-- (cluster/retention.py; also `delayq db prune`); this index lets it find them by status
-- and age without scanning the table. {jobs} is replaced by each shard's fully
-- qualified job table.

ALTER TABLE {jobs} ADD KEY idx_status_modified (status, gmt_modified);
