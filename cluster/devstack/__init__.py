"""Development and test tooling; production code (``cluster/``, ``actors/``) never imports
it, except ``delayq services``, which imports ``cluster.devstack.stack`` when the command runs.
It may import every layer below the CLI (tests/unit/test_layout.py).

- ``stack``: the local stack behind ``delayq services up|down|status|env`` (the public
  entry points: ``up``, ``down``, ``status``, ``stack_env``, ``service_pid``, ``run``)
- ``service``: what a service is: the ``Service`` description, ports, state folder
- ``redis_server``, ``mariadb``, ``zookeeper``, ``kafka`` (Apache Kafka, its jars
  fetched with Maven), ``tansu``: one service each: how to prepare, start and probe it
  (and, in the secure stack, with TLS and passwords)
- ``kafka_acls``: the Kafka ACLs of docs/security.md, which the secure stack applies
- ``mysql_grants``: the MySQL grants of docs/security.md, from which the secure stack
  makes its MySQL users
- ``brokers``: which Kafka broker the stack runs (Apache Kafka or Tansu) and what
  follows from it: its services, bootstrap list and client settings
- ``mysql_servers``: the extra MariaDB servers of ``--mysql-servers N`` (mysql-1, …)
- ``galera``: the three-node MariaDB Galera cluster of ``--galera`` (galera-1..3), and
  ``start_node(i)`` to restart a node a fault test killed
- ``secure``: the secure stack's CA, server certificate and passwords
- ``processes``: spawning, liveness, port ownership and stopping, through psutil
- ``packages``: finding programs and installing missing Debian packages
- ``nodes``: ``NodeProcess``, a ``delayq node`` subprocess that is ready when its ready
  file appears
- ``databases``: a MySQL database per test or benchmark cluster

Usage: ``from devstack import stack; stack.up(); env = stack.stack_env()``.
"""
