-- delayq migration 005: per shard, the recurring schedules (DelayClient.schedule_recurring).
-- A schedule lives in the shard of its name, and the node owning slot_of(name) makes its
-- ticks into ordinary jobs a lookahead before they are due (actors/recurring.py): each
-- tick's job id is derived from the name, the generation and the tick's time
-- (cluster/tick_ids.py), so a tick is one job whoever makes it. next_tick is the cursor:
-- the first tick not made into a job yet; a node moves it on with a compare-and-set in
-- the transaction that writes the ticks' job and outbox rows, while the slot's owner key
-- in Redis carries its epoch (fencing), and records that epoch. A removed schedule keeps
-- its row, so a name added again starts a new generation and its ticks new job ids.
-- {recurring} is replaced by each shard's fully qualified schedule table name.

CREATE TABLE IF NOT EXISTS {recurring} (
  name          VARCHAR(120) NOT NULL COMMENT 'the schedule''s name: its shard and slot',
  slot          INT UNSIGNED NOT NULL COMMENT 'slot_of(name): its owner makes the ticks',
  generation    INT UNSIGNED NOT NULL COMMENT 'definitions the name has had; in tick job ids',
  removed       TINYINT      NOT NULL DEFAULT 0 COMMENT '1 after remove_recurring',
  topic         VARCHAR(249) NOT NULL COMMENT 'Kafka topic every tick fires to',
  biz_id        VARCHAR(200) NULL,
  biz_type      VARCHAR(64)  NULL,
  max_attempts  SMALLINT UNSIGNED NOT NULL,
  payload       MEDIUMTEXT   NOT NULL COMMENT 'JSON text, published verbatim by every tick',
  cron          VARCHAR(200) NULL COMMENT '5-field cron expression; NULL with every_ms',
  every_ms      BIGINT UNSIGNED NULL COMMENT 'fixed interval; NULL with cron',
  tz            VARCHAR(64)  NOT NULL COMMENT 'IANA time zone the cron expression reads',
  start_at      DATETIME(3)  NULL COMMENT 'no tick before (UTC)',
  end_at        DATETIME(3)  NULL COMMENT 'no tick at or after (UTC)',
  missed        VARCHAR(16)  NOT NULL COMMENT 'fire_once or skip: ticks not made in time',
  next_tick     DATETIME(3)  NULL COMMENT 'first tick not made into a job; NULL: no more',
  last_tick     DATETIME(3)  NULL COMMENT 'the last tick made into a job',
  epoch         BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'slot epoch of the last maker',
  gmt_create    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  gmt_modified  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (name),
  KEY idx_next_tick (next_tick)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
