-- delayq migration 001: the job table and its history, created once per shard.
-- {jobs} and {history} are replaced by each shard's fully qualified table names.
-- All times are UTC with millisecond precision.
-- `delayq db migrate` applies each schema/NNN_name.sql once, in order, and records it in
-- delayq_migrations (cluster/migrations.py). Do not edit the statements of an applied
-- migration (their checksum is checked; comment lines are not part of it): add the next
-- numbered file instead.

CREATE TABLE IF NOT EXISTS {jobs} (
  job_id        VARCHAR(200) NOT NULL COMMENT 'caller key or generated id',
  topic         VARCHAR(249) NOT NULL COMMENT 'Kafka topic the job fires to',
  biz_id        VARCHAR(200) NULL COMMENT 'business key; the fired record''s Kafka key',
  biz_type      VARCHAR(64)  NULL,
  status        TINYINT      NOT NULL DEFAULT 0
                COMMENT '0 pending, 1 firing (retrying), 2 fired, 3 cancelled, 4 dead',
  action_time   DATETIME(3)  NOT NULL COMMENT 'due time',
  attempts      SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  max_attempts  SMALLINT UNSIGNED NOT NULL DEFAULT 16,
  payload       MEDIUMTEXT   NOT NULL COMMENT 'JSON text, published verbatim',
  slot          INT UNSIGNED NOT NULL,
  last_error    VARCHAR(1000) NULL,
  gmt_create    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  gmt_modified  DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (job_id),
  KEY idx_status_action_time (status, action_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {history} (
  id       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  job_id   VARCHAR(200) NOT NULL,
  status   TINYINT      NOT NULL COMMENT 'status the job moved to',
  attempt  SMALLINT UNSIGNED NOT NULL DEFAULT 0,
  node     VARCHAR(128) NOT NULL COMMENT 'node id, or client:<host>-<pid>',
  slot     INT UNSIGNED NOT NULL,
  at       DATETIME(3)  NOT NULL,
  note     VARCHAR(1000) NULL COMMENT 'e.g. the error of a failed attempt, or rescheduled',
  PRIMARY KEY (id),
  KEY idx_job (job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
