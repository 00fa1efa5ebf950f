"""Read-only views of a running cluster, for operators and dashboards: the cluster
status (members, slot map, depths), snapshots of every node's metrics, and a node's
health check. No terminal or HTTP rendering here.

May import: cluster.errors, cluster.settings, cluster.connections, cluster.model,
cluster.store.

- ``status``: ``delayq cluster status``'s reading of Redis and ZooKeeper, and
  ``SharedStatus``, one reader and a one-second cache for a server's many askers
- ``snapshot``: ``Snapshot`` of the cluster, the status with each node's /metrics, and
  ``SnapshotReader``, which takes them (``delayq top``, the web console's charts)
- ``node_check``: ``delayq node --check``
"""
