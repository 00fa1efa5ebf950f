"""The Kafka ingress (`delayq ingress`, docs/ingress.md): a producer in any language
schedules a job by producing one record to ingress_topic.

- records.py: a record → a schedule_many() entry or the reason it is refused (pure), the
  derived job id, the error record;
- consumer.py: the loop: rounds of records stored, then their offsets committed;
- process.py: the process (signals, ready file); metrics.py: its /metrics.

It uses the producer API of `cluster` only, never the node runtime (`actors`).
"""
