"""`delayq services up|down|status|env` with its flags: the flags become this process's
DELAYQ_SERVICES_* variables (read by cluster/devstack/stack.py and the modules of each
service), then the command runs on the plain, secure or Galera stack."""

from __future__ import annotations

import os
import sys

from cluster.devstack import galera as galera_nodes
from cluster.devstack import port_memory
from cluster.devstack.mysql_servers import refuse_secure
from cluster.devstack.service import ServicesError
from cluster.devstack.stack import down, env_lines, stack_root, status, up


def run(
    command: str,
    *,
    purge: bool = False,
    redis_cluster: bool = False,
    replicas: int = 0,
    secure: bool = False,
    kafka: str | None = None,
    kafka_brokers: int | None = None,
    mysql_servers_count: int | None = None,
    galera_cluster: bool = False,
    zk_ensemble_size: int | None = None,
) -> int:
    """Run ``up``, ``down``, ``status`` or ``env``; return the process exit code.
    ``redis_cluster`` adds the three-master Redis Cluster (and points ``env`` at it),
    ``replicas`` (0 or 1) a replica of each master; ``secure`` acts on the secure stack
    instead of the plain one; ``kafka`` picks the broker ("apache" or "tansu") and
    ``kafka_brokers`` how many Apache Kafka nodes (1 or 3); ``mysql_servers_count`` how
    many MariaDB servers (cluster/devstack/mysql_servers.py); ``galera_cluster`` acts
    on the three-node Galera cluster instead (cluster/devstack/galera.py);
    ``zk_ensemble_size`` how many ZooKeeper servers (1 or 3: zk_ensemble.py)."""
    if galera_cluster:
        return galera_nodes.run(command, purge=purge, secure=secure)
    if replicas not in (0, 1):
        print("delayq services: --replicas must be 0 or 1", file=sys.stderr)
        return 2
    if redis_cluster or replicas:
        os.environ["DELAYQ_SERVICES_REDIS_CLUSTER"] = "1"
    if replicas:
        os.environ["DELAYQ_SERVICES_REDIS_REPLICAS"] = "1"
    if kafka is not None:
        os.environ["DELAYQ_SERVICES_KAFKA"] = kafka
    if kafka_brokers is not None:
        os.environ["DELAYQ_SERVICES_KAFKA_BROKERS"] = str(kafka_brokers)
    if mysql_servers_count is not None:
        os.environ["DELAYQ_SERVICES_MYSQL_SERVERS"] = str(mysql_servers_count)
    if zk_ensemble_size is not None:
        os.environ["DELAYQ_SERVICES_ZK_ENSEMBLE"] = str(zk_ensemble_size)
    try:
        refuse_secure(secure)
        port_memory.recall(stack_root(secure), secure)
        if command == "up":
            up(secure=secure)
            return 0
        if command == "down":
            down(purge=purge, secure=secure)
            return 0
        if command == "status":
            return 0 if all(status(secure=secure).values()) else 1
        if command == "env":
            print("\n".join(env_lines(secure=secure)), flush=True)
            return 0
    except ServicesError as exc:
        print(f"delayq services {command}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"delayq services: unknown command {command!r} (up, down, status, env)", file=sys.stderr)
    return 2
