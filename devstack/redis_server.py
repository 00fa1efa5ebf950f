"""Redis of the local stack: ``redis-server`` with AOF (appendfsync everysec, noeviction),
and with ``--redis-cluster`` three more instances joined into a three-master Redis
Cluster. How to prepare, start and probe them, and how to form the cluster.
"""

from __future__ import annotations

import subprocess
import time

from devstack.packages import require_program
from devstack.service import (
    CLUSTER_PORTS,
    HOST,
    POLL_S,
    READY_TIMEOUT_S,
    Service,
    ServicesError,
    service_port,
    tcp_exchange,
)


def prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)


def command(svc: Service) -> list[str]:
    return [
        require_program("redis-server", "redis-server"),
        "--port",
        str(svc.port),
        "--bind",
        HOST,
        "--dir",
        str(svc.dir),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--maxmemory-policy",
        "noeviction",
        "--daemonize",
        "no",
        "--logfile",
        str(svc.log_file),
    ]


def cluster_command(svc: Service) -> list[str]:
    """One master of the Redis Cluster: the plain command plus cluster mode."""
    return [
        *command(svc),
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        str(svc.dir / "nodes.conf"),
        "--cluster-node-timeout",
        "5000",
    ]


def probe(svc: Service) -> None:
    reply = tcp_exchange(svc.port, b"PING\r\n", until=b"\r\n")
    if not reply.startswith(b"+PONG"):
        # "-LOADING ..." while the AOF is being replayed.
        raise ServicesError(f"PING answered {reply.strip()!r}")


def form_cluster() -> None:
    """Join the three masters into one cluster (once; they remember it in nodes.conf)
    and wait until every hash slot is served."""
    cli = require_program("redis-cli", "redis-server")
    ports = [service_port(name) for name in CLUSTER_PORTS]

    def state(port: int) -> str:
        out = subprocess.run(
            [cli, "-h", HOST, "-p", str(port), "cluster", "info"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return "ok" if "cluster_state:ok" in out else out.split("cluster_slots_assigned:")[-1]

    if state(ports[0]) != "ok" and state(ports[0]).startswith("0"):
        result = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"{HOST}:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise ServicesError(
                f"redis-cli --cluster create failed: {result.stdout[-500:]}{result.stderr[-500:]}"
            )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(state(port) == "ok" for port in ports):
        if time.monotonic() > deadline:
            raise ServicesError("the Redis Cluster did not reach cluster_state:ok")
        time.sleep(POLL_S)
    print(f"{'cluster':<12}{HOST}:{ports[0]:<6}  redis cluster of 3 masters ready", flush=True)
