"""The Kafka ingress (`delayq ingress`, docs/ingress.md): a producer in any language
schedules a job by producing one record to ingress_topic.

May import: everything below it (cluster.client, cluster.process and their layers);
never the node runtime (`actors`), the web server or the CLI.

- records.py: a record → a schedule_many() entry or the reason it is refused (pure), the
  derived job id, the error record;
- startup.py: the settings it can run with, its consumer and error producer, waiting
  for stores at start-up;
- consumer.py: the loop: rounds of records stored, then their offsets committed;
- process.py: the process as cluster.process.runner runs it; metrics.py: its /metrics.
"""
