"""The job model: what a job is and how it is named, shared by the stores, the Redis
scripts, the client and the node.

May import: cluster.errors, cluster.settings.

- ``job_fields``: the one declaration of a job's fields (``FIELDS``), ``Job``, the
  options' checks and limits; the client, HTTP, CLI, ingress and MySQL derive from it
- ``jobs``: a job's validation (``InvalidJob``, ``ValidJob``), ``Job`` re-exported
- ``job_bounds``: a ValidJob made elsewhere, checked again before it is stored
- ``contract``: statuses and reply codes shared by Python, Lua and SQL (the Lua side is
  generated from it: ``make contract``)
- ``keys``: every Redis key name, the slot of a job
- ``envelope``: the envelope a job carries in Redis and publishes to Kafka
- ``changes``: the answers of cancel and reschedule (``ChangeStatus``)
- ``ticks``, ``tick_ids``: recurring schedules' cron/interval ticks and their job ids
"""
