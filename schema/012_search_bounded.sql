-- delayq migration 012: every equality filter of a search inside its index's prefix.
-- A search by business key and status walked idx_biz_id (biz_id, action_time) and read
-- every job of the key to keep the few of that status; one by business type and topic
-- walked idx_biz_type and read every job of the type. Now a search by business key walks
-- (biz_id, status, action_time), one status range at a time as the other shapes do, and
-- one by business type and topic walks (biz_type, status, topic, action_time)
-- (cluster/store/search.py lists which shape rides which index). A shape left with a
-- filter outside its index (biz_id with topic or biz_type) is bounded in time instead:
-- search_statement_max_ms. {jobs} is replaced by each shard's fully qualified job table.

ALTER TABLE {jobs}
  DROP KEY idx_biz_id,
  ADD KEY idx_biz_id (biz_id, status, action_time),
  ADD KEY idx_biz_type_topic (biz_type, status, topic, action_time),
  ALGORITHM=INPLACE, LOCK=NONE;
