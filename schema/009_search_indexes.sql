-- delayq migration 009: indexes for browsing and searching jobs, and for counting them.
-- Searches (cluster/store/search.py; `delayq jobs list`, GET /v1/jobs, the console) walk
-- one of these in due-time order and page with a (due time, job id) cursor, never an
-- OFFSET: by status and topic, by business key, or by business type and status. Pending
-- counts per topic (cluster/store/counts.py) read the first one. InnoDB builds them in
-- place while the table stays readable and writable. {jobs} is replaced by each shard's
-- fully qualified job table.

ALTER TABLE {jobs}
  ADD KEY idx_status_topic_due (status, topic, action_time),
  ADD KEY idx_biz_id (biz_id, action_time),
  ADD KEY idx_biz_type (biz_type, status, action_time),
  ALGORITHM=INPLACE, LOCK=NONE;
