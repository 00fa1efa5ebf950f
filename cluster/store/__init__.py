"""The MySQL store: every job's durable record, its history, the outbox, recurring
schedules, retention, and the versioned migrations (schema/, shipped as cluster.schema).

May import: cluster.errors, cluster.settings, cluster.model.

- ``mysql_store``: ``MySQLStore``, the job table's reads and writes across shards
- ``job_writes``: the SQL of the hot writes: new job rows, outcomes, history rows
- ``listings``: expired jobs, a job's history, the outbox's oldest rows
- ``connect``: every MySQL connection and pool delayq opens (TLS checked on each one),
  and the charset check of a caller's connection (schedule_in)
- ``sql``: connection URLs, time conversions, statements built as text, overlapped runs
- ``rows``: a job row as a ``JobRecord``
- ``migrations``: what a migration is, and ``delayq db migrate`` applying them
- ``migration_files``: the files of schema/ read, split into statements, checksummed
- ``schema_check``: the check of the schema and the layout on every open
- ``recurring_store``: recurring schedules' rows and cursors
- ``retention``: deleting finished jobs past their retention
"""
