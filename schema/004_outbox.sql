-- delayq migration 004: per shard, the outbox of jobs scheduled inside a caller's own
-- transaction (DelayClient.schedule_in). The caller's transaction writes the job row and
-- an outbox row together, so the outbox row becomes visible exactly when the job does:
-- at commit, never for a rollback. The node owning the job's slot reads its slots'
-- outbox rows every outbox_poll_ms, adds those jobs to Redis, and deletes the rows
-- (actors/outbox.py).
-- {outbox} is replaced by each shard's fully qualified outbox table name.

CREATE TABLE IF NOT EXISTS {outbox} (
  id       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  job_id   VARCHAR(200) NOT NULL,
  slot     INT UNSIGNED NOT NULL,
  PRIMARY KEY (id),
  KEY idx_slot (slot, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
