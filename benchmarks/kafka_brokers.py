"""A private three-broker Apache Kafka for the benchmarks, beside the shared local stack.

    python benchmarks/kafka_brokers.py up       # start it (formatted the first time)
    python benchmarks/kafka_brokers.py env      # export DELAYQ_KAFKA_BOOTSTRAP=...
    python benchmarks/kafka_brokers.py status   # health: every broker up, every ISR full
    python benchmarks/kafka_brokers.py down     # kill its brokers and delete its folder

    eval "$(python benchmarks/kafka_brokers.py env)"
    python benchmarks/fire_bench.py --jobs 50000 --window 10 --pattern steady

The local stack keeps its one broker (`delayq services up`); this starts three more
Apache Kafka nodes, each broker and controller, with the stack's own jars and
configuration (cluster/devstack/kafka.py, through tests/kafka_cluster.py's
KafkaCluster): replication factor 3 and min.insync.replicas 2 for every topic by
default, the offsets and transaction state topics included. The benchmarks' own topics
are made the same way (benchmarks/fire_bench.py kafka_topic). Its state folder is
``$DELAYQ_STATE_DIR/kafka-bench`` and its client ports 19700, 19800 and 19900
(controllers on port + 3), or from DELAYQ_BENCH_KAFKA_PORT on (the others 100 and 200
above it): apart from the stack's and from the Kafka fault tests' cluster. The brokers
run detached: they outlive this command until `down`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/kafka_cluster.py

from cluster.devstack import kafka  # noqa: E402
from cluster.devstack.service import state_dir  # noqa: E402
from tests.kafka_cluster import KafkaCluster  # noqa: E402

FIRST_PORT = 19700
PORT_STEP = 100
PORT_VARIABLE = "DELAYQ_BENCH_KAFKA_PORT"
FOLDER = "kafka-bench"


def the_cluster() -> KafkaCluster:
    raw = os.environ.get(PORT_VARIABLE, "").strip()
    first = int(raw) if raw else FIRST_PORT
    ports = {name: first + i * PORT_STEP for i, name in enumerate(kafka.node_names(3))}
    return KafkaCluster(state_dir() / FOLDER, ports)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "env", "status", "down"])
    args = parser.parse_args()
    cluster = the_cluster()
    if args.action == "up":
        kafka.fetch()
        took = cluster.start()
        healthy = asyncio.run(cluster.wait_healthy(120))
        print(
            f"three Apache Kafka {kafka.VERSION} brokers on {cluster.bootstrap} "
            f"({cluster.root}): registered in {took:.1f} s, healthy {healthy:.1f} s later",
            file=sys.stderr,
        )
        print(f"export DELAYQ_KAFKA_BOOTSTRAP={cluster.bootstrap}")
    elif args.action == "env":
        print(f"export DELAYQ_KAFKA_BOOTSTRAP={cluster.bootstrap}")
    elif args.action == "status":
        problems = asyncio.run(cluster.problems())
        pids = {name: cluster.pid(name) for name in cluster.ports}
        print(f"{cluster.bootstrap}: pids {pids}")
        for problem in problems:
            print(f"  {problem}")
        sys.exit(1 if problems else 0)
    else:
        cluster.destroy()
        print(f"stopped the brokers of {cluster.root} and deleted it", file=sys.stderr)


if __name__ == "__main__":
    main()
