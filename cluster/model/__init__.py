"""The job model: what a job is and how it is named, shared by the stores, the Redis
scripts, the client and the node.

May import: cluster.errors, cluster.settings.

- ``jobs``: ``Job``, its validation (``InvalidJob``, ``ValidJob``), the limits
- ``contract``: statuses and reply codes shared by Python, Lua and SQL (the Lua side is
  generated from it: ``make contract``)
- ``keys``: every Redis key name, the slot of a job
- ``envelope``: the envelope a job carries in Redis and publishes to Kafka
- ``changes``: the answers of cancel and reschedule (``ChangeStatus``)
- ``ticks``, ``tick_ids``: recurring schedules' cron/interval ticks and their job ids
"""
