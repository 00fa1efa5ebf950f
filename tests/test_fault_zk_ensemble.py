"""Faults of a ZooKeeper ensemble of three: real node processes fire jobs scheduled at a
steady rate while the ensemble's leader is killed -9 and started again, while two of
the three servers are down for 30 s (no quorum), and while one node is cut off from
ZooKeeper alone (it still reaches Redis, MySQL and Kafka).

These scenarios kill ZooKeeper servers, so they run on a private stack of their own
(`delayq services up --zk-ensemble 3` with its own state folder and ports: Redis 27379,
MariaDB 27306, ZooKeeper 27181/27281/27381 (quorum and election ports + 10 and + 20),
Kafka 27092; DELAYQ_TEST_PRIVATE_ZK_STACK_DIR moves the folder), started by this module
and stopped at its end; the shared local stack is never touched. Each scenario checks
what the fault suite checks (tests/checker.py: nothing lost, none early, MySQL and
Redis agree afterwards), samples every node's /metrics (slots owned, jobs moved, fenced
script runs) and prints its counts, the lateness and the longest pause in publishing
(docs/guarantees.md has the results).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient, open_redis
from cluster.devstack import zk_ensemble
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.devstack.nodes import free_port
from cluster.model.keys import KeySpace
from cluster.observe.status import read_status
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.checker import Ledger, Verdict
from tests.conftest import Collector, wait_for
from tests.private_stack import PrivateStack, gone
from tests.processes import NodeProcess, slots_served_by, wait_served
from tests.test_fault_mysql_servers import spread_s
from tests.test_faults import assert_safe, reading, settle, steady_load
from tests.zk_relay import Relay

pytestmark = [pytest.mark.slow, pytest.mark.faults]

STATE_DIR = Path(
    os.environ.get("DELAYQ_TEST_PRIVATE_ZK_STACK_DIR", "/tmp/delayq-fault-zk-ensemble")
)
PORTS = {
    "REDIS": "27379",
    "MYSQL": "27306",
    "ZOOKEEPER": "27181",
    "ZOOKEEPER_2": "27281",
    "ZOOKEEPER_3": "27381",
    "KAFKA": "27092",
}
SERVERS = {"zookeeper": 27181, "zookeeper-2": 27281, "zookeeper-3": 27381}
FAULT_AT_S = 4.0  # after the load began
LEADER_DOWN_S = 5.0
NO_QUORUM_S = 30.0
PARTITION_S = 10.0  # past the nodes' 3 s session timeout (tests/processes.py)
SAMPLE_S = 0.1


# ----- the private stack --------------------------------------------------------------


STACK = PrivateStack(STATE_DIR, PORTS, ("--zk-ensemble", "3"))


@pytest.fixture(scope="module")
def private_env() -> Iterator[dict[str, str]]:
    """The private stack, up for this module: its DELAYQ_* settings."""
    with STACK.running() as env:
        yield env


def modes() -> dict[str, str | None]:
    """Each server's srvr Mode: leader, follower, or None (down or without a quorum)."""
    return {name: zk_ensemble.mode_of(port) for name, port in SERVERS.items()}


def leader() -> str | None:
    return next((name for name, mode in modes().items() if mode == "leader"), None)


async def kill(name: str) -> None:
    pid = STACK.pid(name)
    os.kill(pid, signal.SIGKILL)
    await gone(pid)


async def restart_servers() -> None:
    """Start what is down of the private stack and wait until the ensemble serves."""
    await STACK.restart()


# ----- per-test fixtures on the private stack (they replace conftest's) -------------------


@pytest.fixture
async def settings(private_env: dict[str, str]) -> AsyncIterator[Settings]:
    if None in modes().values():  # left down by a scenario that failed half-way
        await restart_servers()
    base = Settings.from_env(private_env)
    prefix = f"t{uuid.uuid4().hex[:10]}"
    made = await create_cluster_database(
        base.replace(key_prefix=prefix, node_id=f"test-{uuid.uuid4().hex[:6]}"),
        f"delayq_{prefix}",
    )
    yield made
    await drop_cluster_database(made)


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[RedisClient]:
    client = await open_redis(settings)
    yield client
    await client.aclose()


# client, topic and collector are conftest's, made with this module's settings.


# ----- what the nodes say about themselves ------------------------------------------------


def read_metrics(port: int) -> dict[str, float]:
    """A node's unlabelled series (delayq_slots_owned, delayq_jobs_moved_total, …)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


@dataclass
class Round:
    """Every node's metrics at about the same moment."""

    at: float  # time.time()
    nodes: dict[str, dict[str, float]]

    def owned(self, node: str) -> float | None:
        return self.nodes[node].get("delayq_slots_owned")

    def none_owned(self) -> bool:
        return all(self.owned(node) == 0 for node in self.nodes)


@dataclass
class Run:
    """One scenario: its nodes, what they said, and when the fault struck and healed."""

    name: str
    procs: list[NodeProcess]
    ports: dict[str, int]  # node → metrics port
    rounds: list[Round] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # event → time.time()

    def mark(self, event: str) -> None:
        self.marks[event] = time.time()

    async def sample(self, done: asyncio.Event) -> None:
        while not done.is_set():
            at = time.time()
            nodes = {
                proc.name: await asyncio.to_thread(read_metrics, self.ports[proc.name])
                for proc in self.procs
            }
            self.rounds.append(Round(at, nodes))
            await asyncio.sleep(SAMPLE_S)

    def between(self, start: str, end: str) -> list[Round]:
        return [r for r in self.rounds if self.marks[start] <= r.at < self.marks[end]]

    def dropped_s(self, node: str, start: str, end: str) -> float:
        """How long the node held no slot between two marks (sampled)."""
        rounds = self.between(start, end)
        zero = [r.at for r in rounds if r.owned(node) == 0]
        return (zero[-1] - zero[0] + SAMPLE_S) if zero else 0.0


def longest_pause_s(records: list[dict[str, Any]], start: float, end: float) -> float:
    """The longest time no record arrived at the consumer between two times (s)."""
    times = sorted(float(r["received_ms"]) / 1000 for r in records)
    edges = [start, *(t for t in times if start <= t <= end), end]
    return max(b - a for a, b in itertools.pairwise(edges))


def lateness(records: list[dict[str, Any]], start: float | None = None) -> str:
    """p50 / p99 / max lateness of each job's first record (of those due after `start`)."""
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(str(record["job_id"]), record)
    return spread_s(
        [
            r["received_ms"] - r["due_ms"]
            for r in first.values()
            if start is None or r["due_ms"] >= start * 1000
        ]
    )


async def scenario(
    name: str,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
    fault: Callable[[Run], Awaitable[None]],
    *,
    nodes: int = 2,
    load_s: float,
    node_env: Callable[[int], dict[str, str]] | None = None,
) -> tuple[Verdict, Ledger, Run]:
    """`nodes` nodes serving every slot, then the fault suite's load (500 jobs/s due
    0.3-2 s ahead) for load_s with the fault FAULT_AT_S into it, each node's metrics
    sampled meanwhile; settled and judged as `name`."""
    ports = {f"{name}-{i}": free_port() for i in range(nodes)}
    procs = [
        NodeProcess(
            settings,
            tmp_path,
            node,
            {"DELAYQ_METRICS_PORT": str(port), **(node_env(i) if node_env else {})},
        )
        for i, (node, port) in enumerate(ports.items())
    ]
    run = Run(name, procs, ports)
    ledger = Ledger()
    done = asyncio.Event()
    sampler: asyncio.Task[None] | None = None
    try:
        for proc in procs:
            await proc.wait_ready()
        await wait_served(settings, set(ports))
        sampler = asyncio.create_task(run.sample(done))
        async with reading(collector):
            run.mark("load")
            load = asyncio.create_task(steady_load(ledger, client, topic, seconds=load_s))
            await asyncio.sleep(FAULT_AT_S)
            await fault(run)
            await load
            run.mark("load_end")
        result = await settle(name, ledger, collector, client, redis, timeout_s=180)
        run.mark("settled")
        assert [proc.returncode for proc in procs] == [None] * nodes  # all ran throughout
    finally:
        done.set()
        if sampler is not None:
            await sampler
        for proc in procs:
            proc.kill()
    return result, ledger, run


def report(run: Run, result: Verdict, collector: Collector, extra: str) -> None:
    records = collector.records
    fenced = {
        node: max((r.nodes[node].get("delayq_fenced_total", 0.0) for r in run.rounds), default=0)
        for node in run.ports
    }
    print(
        f"[{run.name}] scheduled {result.scheduled}, fired {result.fired}, duplicates "
        f"{result.duplicates}, lost {len(result.lost)}, early {result.early}; lateness "
        f"all {lateness(records)}, due after the healing "
        f"{lateness(records, run.marks['healed'])}; longest pause in publishing "
        f"{longest_pause_s(records, run.marks['load'], run.marks['load_end']):.2f} s; "
        f"fenced script runs per node {fenced}; {extra}"
    )


# ----- the scenarios --------------------------------------------------------------------


async def test_the_zookeeper_leader_killed_and_restarted(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """kill -9 of the ensemble's leader: the two others elect a new one; the nodes keep
    their slots or take them again, and it comes back as a follower 5 s later."""
    killed: list[str] = []

    async def fault(run: Run) -> None:
        old = leader()
        assert old is not None
        killed.append(old)
        await kill(old)
        run.mark("struck")

        async def elected() -> bool:
            return leader() not in (None, old)

        assert await wait_for(elected, timeout_s=60, interval_s=0.05)
        run.mark("elected")
        await asyncio.sleep(LEADER_DOWN_S)
        await restart_servers()
        run.mark("healed")

    result, ledger, run = await scenario(
        "zk-leader-killed",
        settings,
        client,
        redis,
        topic,
        collector,
        tmp_path,
        fault,
        load_s=FAULT_AT_S + LEADER_DOWN_S + 8,
    )
    drops = {node: round(run.dropped_s(node, "struck", "settled"), 1) for node in run.ports}
    report(
        run,
        result,
        collector,
        f"leader {killed[0]} killed, new leader after "
        f"{run.marks['elected'] - run.marks['struck']:.2f} s, back after "
        f"{run.marks['healed'] - run.marks['struck']:.1f} s; modes now {modes()}; "
        f"longest time a node held no slot {drops} s",
    )
    assert_safe(result, ledger)
    assert result.unfinished == 0
    assert result.duplicates == 0
    assert sorted(str(mode) for mode in modes().values()) == ["follower", "follower", "leader"]


async def test_two_of_three_zookeeper_servers_down_for_30_s(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """No quorum for 30 s: the nodes stop moving and claiming (no slot owned, no job
    moved), nothing fires early or twice, and they serve every slot again once the
    servers are back."""

    async def fault(run: Run) -> None:
        first = leader()
        assert first is not None
        second = next(name for name in SERVERS if name != first)
        await asyncio.gather(kill(first), kill(second))
        run.mark("struck")
        await asyncio.sleep(NO_QUORUM_S)
        run.mark("resumed")
        await restart_servers()
        run.mark("healed")
        await wait_served(settings, set(run.ports), timeout_s=120)
        run.mark("served")

    result, ledger, run = await scenario(
        "zk-no-quorum-30s",
        settings,
        client,
        redis,
        topic,
        collector,
        tmp_path,
        fault,
        load_s=FAULT_AT_S + NO_QUORUM_S + 10,
    )
    idle = [r for r in run.between("struck", "resumed") if r.none_owned()]
    assert idle, "the nodes kept slots without a quorum"
    stopped_after = idle[0].at - run.marks["struck"]
    # From the first moment no node owned a slot until the quorum came back, no job moved.
    moved = [
        {node: r.nodes[node].get("delayq_jobs_moved_total") for node in run.ports}
        for r in (idle[0], idle[-1])
    ]
    report(
        run,
        result,
        collector,
        f"no node owned a slot from {stopped_after:.2f} s after the fault on (sampled "
        f"{len(idle)} times, moved counters {moved[0]} then {moved[1]}); every slot "
        f"served again {run.marks['served'] - run.marks['healed']:.2f} s after the servers "
        f"were back ({run.marks['healed'] - run.marks['struck']:.1f} s after the fault)",
    )
    assert moved[0] == moved[1]
    assert_safe(result, ledger)
    assert result.unfinished == 0
    assert result.duplicates == 0


async def test_a_node_cut_off_from_zookeeper_alone(
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    topic: str,
    collector: Collector,
    tmp_path: Path,
) -> None:
    """Three nodes; node 0 reaches the ensemble through relays the test cuts for 10 s
    (silence, no closed connection), Redis, MySQL and Kafka directly. It stops working
    on its slots on its own, the others take them after its session expires, with new
    epochs that fence any write of its old ones; it rejoins once healed."""
    relays = [Relay(port) for port in SERVERS.values()]
    for relay in relays:
        await relay.start()
    hosts = ",".join(relay.address for relay in relays)
    before: dict[int, int] = {}  # node 0's slots and their epochs at the cut
    fenced: dict[int, bool] = {}

    async def fault(run: Run) -> None:
        cut_off = run.procs[0].name
        status = await read_status(settings)
        before.update({s.slot: s.epoch for s in status.slot_status if s.owner_node == cut_off})
        assert before
        for relay in relays:
            relay.cut()
        run.mark("struck")
        others = {proc.name for proc in run.procs[1:]}
        await wait_served(settings, others, timeout_s=60)
        run.mark("taken")
        # Its late writes: a script run as the owner with its old epochs is refused.
        scripts = Scripts(redis, KeySpace(settings.key_prefix))
        replies = await scripts.move_many(sorted(before.items()), limit=10)
        fenced.update(
            {slot: reply is None for slot, reply in zip(sorted(before), replies, strict=True)}
        )
        await asyncio.sleep(max(0.0, PARTITION_S - (time.time() - run.marks["struck"])))
        for relay in relays:
            relay.heal()
        run.mark("healed")
        await wait_served(settings, {proc.name for proc in run.procs}, timeout_s=120)
        run.mark("rejoined")

    try:
        result, ledger, run = await scenario(
            "zk-node-partitioned",
            settings,
            client,
            redis,
            topic,
            collector,
            tmp_path,
            fault,
            nodes=3,
            load_s=FAULT_AT_S + PARTITION_S + 10,
            node_env=lambda i: {"DELAYQ_ZK_HOSTS": hosts} if i == 0 else {},
        )
    finally:
        for relay in relays:
            await relay.close()
    cut_off = run.procs[0].name
    gave_up = "dropping all" in run.procs[0].log_path.read_text()
    served = await slots_served_by(settings)
    report(
        run,
        result,
        collector,
        f"{cut_off} held {len(before)} slots; it held none after "
        f"{run.dropped_s(cut_off, 'struck', 'taken'):.1f} s of sampling before the others "
        f"took them, {run.marks['taken'] - run.marks['struck']:.2f} s after the cut; its "
        f"old epochs refused by Redis on {sum(fenced.values())} of {len(fenced)} slots; "
        f"dropped its slots on its own: {gave_up}; rejoined "
        f"{run.marks['rejoined'] - run.marks['healed']:.2f} s after the healing; slots now "
        f"by node {sorted(set(served.values()), key=str)}",
    )
    assert fenced and all(fenced.values())
    assert gave_up
    assert_safe(result, ledger)
    assert result.unfinished == 0
