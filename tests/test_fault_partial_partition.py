"""Partial partitions: one node of three is cut off from one service alone.

Node 0 reaches one service (Redis, Kafka, MySQL or ZooKeeper) through a relay of the
test (tests/zk_relay.py; tests/kafka_relay.py for the broker, whose addresses it
rewrites) and the others directly. Under the fault suite's load (tests/faults/load.py)
the relay is blackholed for CUT_S: it forwards nothing and closes nothing, as a network
that drops packets, while node 0 still reaches the other three services. Then it
forwards again.

Cut off from Redis, Kafka or ZooKeeper, node 0 cannot do its slots' work: the others
must serve them within the bound of docs/guarantees.md (store_unreachable_release_ms,
or for ZooKeeper the session timeout, plus TAKE_OVER_S), and node 0 must take its share
back once healed. Cut off from MySQL alone it keeps its slots and fires what Redis
holds. Each scenario then checks what the fault suite checks (tests/faults/verdict.py: nothing
lost, none early, MySQL and Redis agree).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.faults.scenario import Run, Stage, scenario, stage
from tests.faults.verdict import Verdict, assert_safe
from tests.kafka_relay import KafkaRelay
from tests.processes import FAST_FAILOVER, slots_served_by, wait_served
from tests.zk_relay import Relay

pytestmark = [
    pytest.mark.slow,
    pytest.mark.faults,
    pytest.mark.skipif(
        os.environ.get("DELAYQ_TEST_REDIS_CLUSTER") == "1",
        reason="a relay in front of one node of a Redis Cluster cannot cut a client off it",
    ),
]
__all__ = ["stage"]  # a fixture of tests/faults/scenario.py

NODES = 3
CUT_S = 8.0
RELEASE_MS = 1500  # store_unreachable_release_ms of the nodes
SESSION_S = int(FAST_FAILOVER["DELAYQ_ZK_SESSION_TIMEOUT_MS"]) / 1000
# The others serve the cut node's slots this long after the bound at the latest: the
# node's checks and its next membership pass, the others' pass and their takes.
TAKE_OVER_S = 2.0
SETTING = {"redis": "REDIS_URL", "kafka": "KAFKA_BOOTSTRAP", "mysql": "MYSQL_URL", "zk": "ZK_HOSTS"}


def _target(settings: Settings, service: str) -> tuple[str, int]:
    """The host and port a node reaches the service at."""
    if service == "redis":
        url = urlparse(settings.redis_url)
        return url.hostname or "127.0.0.1", url.port or 6379
    if service == "mysql":
        url = urlparse(settings.mysql_url)
        return url.hostname or "127.0.0.1", url.port or 3306
    address = settings.kafka_bootstrap if service == "kafka" else settings.zk_hosts
    host, _, port = address.split(",")[0].rpartition(":")
    return host, int(port)


def _through(settings: Settings, service: str, relay: Relay) -> str:
    """The service's setting for a node that reaches it through the relay."""
    if service in ("redis", "mysql"):
        url = urlparse(settings.redis_url if service == "redis" else settings.mysql_url)
        userinfo = url.netloc.rpartition("@")
        return url._replace(netloc=f"{userinfo[0]}{userinfo[1]}{relay.address}").geturl()
    return relay.address


def _bound_s(service: str) -> float:
    """How soon after the cut the others serve every slot (docs/guarantees.md)."""
    return (SESSION_S if service == "zk" else RELEASE_MS / 1000) + TAKE_OVER_S


def _spread(lateness_ms: list[float]) -> str:
    if not lateness_ms:
        return "-"
    ordered = sorted(lateness_ms)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    p50, top = ordered[len(ordered) // 2], ordered[-1]
    return f"p50 {p50 / 1000:.2f} s, p99 {p99 / 1000:.2f} s, max {top / 1000:.2f} s"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("service", ["redis", "kafka", "mysql", "zk"])
async def test_a_node_cut_off_from_one_service(service: str, stage: Stage) -> None:
    await cut_off_from(stage, service)


@pytest.mark.long
@pytest.mark.timeout(240)
async def test_a_node_cut_off_from_kafka_with_exactly_once(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    tmp_path: Path,
) -> None:
    """With delivery = exactly_once, what node 0 had sent when it was cut off and what
    the others fire of its slots never both reach a read_committed consumer: the others'
    transactions fence node 0's transactional ids."""
    collector = Collector(settings, topic, isolation_level="read_committed")
    await collector.start()
    try:
        stage = Stage(settings, client, redis, topic, collector, tmp_path)
        result = await cut_off_from(stage, "kafka", {"DELAYQ_DELIVERY": "exactly_once"})
    finally:
        await collector.stop()
    assert result.duplicates == 0


async def cut_off_from(
    stage: Stage, service: str, extra_env: dict[str, str] | None = None
) -> Verdict:
    """The scenario (module docstring), judged; its verdict."""
    settings, collector = stage.settings, stage.collector
    host, port = _target(settings, service)
    relay = KafkaRelay(host, port) if service == "kafka" else Relay(port)
    await relay.start()
    env = {"DELAYQ_STORE_UNREACHABLE_RELEASE_MS": str(RELEASE_MS), **(extra_env or {})}
    name = f"cut-from-{service}" + ("-eos" if extra_env else "")
    through = {f"DELAYQ_{SETTING[service]}": _through(settings, service, relay)}
    marks: dict[str, float] = {}
    held: list[int] = []

    async def fault(run: Run) -> None:
        names = {proc.name for proc in run.procs}
        cut_off = run.procs[0].name
        await wait_served(settings, names)
        served = await slots_served_by(settings)
        held.extend(slot for slot, node in served.items() if node == cut_off)
        relay.cut()
        marks["cut"] = time.time()
        try:
            if service == "mysql":
                await asyncio.sleep(CUT_S)
                # It kept its slots throughout (and fired their jobs: asserted below).
                await wait_served(settings, names, timeout_s=0)
            else:
                await wait_served(settings, names - {cut_off}, timeout_s=_bound_s(service))
                marks["taken"] = time.time()
                await asyncio.sleep(max(0.0, marks["cut"] + CUT_S - time.time()))
        finally:
            relay.heal()
            marks["healed"] = time.time()
        await wait_served(settings, names, timeout_s=60)
        marks["rejoined"] = time.time()

    try:
        result, ledger, run = await scenario(
            stage,
            name,
            fault,
            nodes=NODES,
            node_env=lambda i: {**env, **through} if i == 0 else env,
        )
    finally:
        await relay.close()
    cut_off = run.procs[0]
    log = cut_off.log_path.read_text()
    cut_ms, healed_ms = marks["cut"] * 1000, marks["healed"] * 1000
    first: dict[str, dict[str, object]] = {}  # each job's first record
    for record in collector.records:
        first.setdefault(str(record["job_id"]), record)
    during = [r for r in first.values() if cut_ms <= float(r["due_ms"]) < healed_ms]
    lateness = [float(r["received_ms"]) - float(r["due_ms"]) for r in during]
    by_cut_node = [r for r in during if r["node"] == cut_off.name]
    print(
        f"[{name}] node 0 held {len(held)} of {settings.slots} slots; "
        + (
            f"the others served them {marks['taken'] - marks['cut']:.2f} s after the cut "
            f"(bound {_bound_s(service):.1f} s); "
            if "taken" in marks
            else ""
        )
        + f"every slot served by all three again {marks['rejoined'] - marks['healed']:.2f} s "
        f"after the healing; jobs due during the cut: {len(during)}, fired by node 0 "
        f"{len(by_cut_node)}, lateness {_spread(lateness)}"
    )
    assert held
    assert_safe(result, ledger)
    assert result.unfinished == 0
    if service in ("redis", "kafka"):
        assert "withdrew from the cluster" in log
    if service == "mysql":
        assert "withdrew from the cluster" not in log
        assert by_cut_node  # it kept firing what Redis held
    return result
