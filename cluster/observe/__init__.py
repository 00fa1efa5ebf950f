"""Read-only views of a running cluster, for operators and dashboards: the cluster
status (members, slot map, depths), snapshots of every node's metrics, and a node's
health check. No terminal or HTTP rendering here.

May import: cluster.errors, cluster.settings, cluster.connections, cluster.model,
cluster.store.

- ``status``: ``delayq cluster status``'s reading of Redis and ZooKeeper
- ``snapshot``: ``Snapshot`` of the cluster from the nodes' /metrics (``delayq top``, the
  console's charts, the node's sampler)
- ``node_check``: ``delayq node --check``
"""
