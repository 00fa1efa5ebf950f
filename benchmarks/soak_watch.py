"""What benchmarks/soak.py samples of every process of the production shape: resident
memory, open file descriptors and threads (psutil), for delayq's own processes also
their TCP connections to each store (by the remote port) and their asyncio task count
(`delayq_asyncio_tasks` from their /metrics), so that a leak shows as growth between
the first and the last sample.
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass

import psutil

from cluster.devstack import processes, production, stack
from cluster.devstack.service import Service


@dataclass(frozen=True)
class Watched:
    name: str
    kind: str  # "delayq" (node, web, ingress) or the store it is
    service: Service
    metrics_port: int | None  # where delayq_asyncio_tasks is served


def _kind(svc: Service) -> str:
    return {
        "redis-server": "redis",
        "mariadbd": "mysql",
        "QuorumPeerMain": "zookeeper",
    }.get(svc.marker, "kafka")


def watched(extra: list[str]) -> list[Watched]:
    """Every process of the shape: delayq's parts (and the extra parts named), then the
    stack's services (the plain Redis beside the cluster is not part of the shape)."""
    ours = [
        Watched(
            svc.name,
            "delayq",
            svc,
            production.WEB_METRICS_PORT if svc.name == "web" else svc.port,
        )
        for svc in [*production.parts(), *(production.part(name) for name in extra)]
    ]
    stores = [
        Watched(svc.name, _kind(svc), svc, None) for svc in stack.services() if svc.name != "redis"
    ]
    return ours + stores


def store_ports() -> dict[int, str]:
    """Remote port -> the store it belongs to (Kafka controller ports are not dialled)."""
    return {svc.port: _kind(svc) for svc in stack.services()}


def _tasks(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("delayq_asyncio_tasks "):
            return int(float(line.split()[1]))
    return None


def sample(items: list[Watched], ports: dict[int, str]) -> dict[str, dict[str, object]]:
    """One sample of each running process: pid, rss_mb, fds, threads, and for delayq's
    own the connections per store and the asyncio tasks."""
    out: dict[str, dict[str, object]] = {}
    for item in items:
        pid = processes.read_pid(item.service)
        if pid is None:
            continue
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                row: dict[str, object] = {
                    "pid": pid,
                    "rss_mb": round(proc.memory_info().rss / 2**20, 1),
                    "fds": proc.num_fds(),
                    "threads": proc.num_threads(),
                }
            if item.kind == "delayq":
                links: dict[str, int] = {}
                for conn in proc.net_connections(kind="tcp"):
                    store = ports.get(conn.raddr.port) if conn.raddr else None
                    if store is not None and conn.status == psutil.CONN_ESTABLISHED:
                        links[store] = links.get(store, 0) + 1
                row["connections"] = links
                row["asyncio_tasks"] = _tasks(item.metrics_port) if item.metrics_port else None
        except psutil.Error:
            continue
        out[item.name] = {"t": time.time(), **row}
    return out
