"""Connections: opening Redis (single or Cluster), Kafka and ZooKeeper clients with the
settings' addresses, TLS and credentials, and turning their refusals into clear errors.
MySQL connections are the store's own (cluster.store.sql).

May import: cluster.errors, cluster.settings.

- ``redis_conn``: ``open_redis``, ``RedisClient``
- ``kafka_conn``: producer and consumer options, ``start_client``
- ``zk_conn``: ``make_zk``, znode ACLs
"""
