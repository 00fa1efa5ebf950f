"""The shared stack's Redis Cluster with replicas (`delayq services up --redis-cluster
--replicas 1`), as the failover scenarios use it: its nodes, which is master, their
health, making a node master again or starting a killed one, and the fixture
healthy_cluster (a healthy cluster before the test, and again after it), and the
mark needs_replicas."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from cluster.devstack import stack
from cluster.devstack.service import HOST
from tests.faults.shared import shared_pid

# Skips a test unless the suite runs on the Redis Cluster with a replica per master.
needs_replicas = pytest.mark.skipif(
    os.environ.get("DELAYQ_TEST_REDIS_REPLICAS") != "1",
    reason="needs the Redis Cluster with replicas (DELAYQ_TEST_REDIS_REPLICAS=1)",
)


def cluster_ports() -> list[int]:
    return [svc.port for svc in stack.services() if svc.name.startswith("redis-c")]


async def replication(port: int) -> dict[str, object] | None:
    """INFO replication of one cluster node, or None when it does not answer."""
    redis = Redis(host=HOST, port=port, socket_timeout=1, socket_connect_timeout=1)
    try:
        return dict(await redis.info("replication"))
    except Exception:
        return None
    finally:
        await redis.aclose()


async def pairs() -> list[tuple[int, int]]:
    """(master port, port of its connected replica) for every master that has one."""
    found = []
    for port in cluster_ports():
        info = await replication(port)
        if info is None or info.get("role") != "master":
            continue
        replica = info.get("slave0")
        if isinstance(replica, dict) and replica.get("state") == "online":
            found.append((port, int(replica["port"])))
    return found


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 60
) -> float:
    """Poll until predicate() holds; returns the time.time() it was first seen."""
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return time.time()


async def cluster_healthy() -> bool:
    """Three masters, each with an online replica, and every node says cluster_state:ok."""
    if len(await pairs()) != 3:
        return False
    for port in cluster_ports():
        redis = Redis(host=HOST, port=port, socket_timeout=1)
        try:
            info = await redis.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
            if "cluster_state:ok" not in info.decode():
                return False
        except Exception:
            return False
        finally:
            await redis.aclose()
    return True


async def is_master(port: int) -> bool:
    info = await replication(port)
    return info is not None and info.get("role") == "master"


async def ensure_master(port: int) -> None:
    """Make the node on `port` a master again (a graceful failover onto it)."""
    if await is_master(port):
        return
    redis = Redis(host=HOST, port=port)
    try:
        await redis.execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]
    finally:
        await redis.aclose()
    await wait_until(lambda: is_master(port), f"{port} to become master")
    await wait_until(cluster_healthy, "the cluster to be healthy")


async def restart_node(port: int) -> None:
    """Start a killed cluster node again (it rejoins as its successor's replica)."""
    await asyncio.to_thread(stack.up)
    await wait_until(cluster_healthy, "the old master back as a replica", 90)


@pytest.fixture
async def healthy_cluster() -> AsyncIterator[None]:
    await wait_until(cluster_healthy, "the cluster to be healthy", 90)
    yield
    # Leave the next test a healthy cluster whatever happened here.
    await asyncio.to_thread(stack.up)
    await wait_until(cluster_healthy, "the cluster to be healthy", 90)


def pid_of(port: int) -> int:
    """The pid of the cluster node on `port`."""
    for svc in stack.services():
        if svc.port == port:
            return shared_pid(svc.name)
    raise AssertionError(f"no cluster node on port {port}")
