"""Kafka fault scenarios: two real node processes fire a steady load (tests/faults/load.py's:
500 jobs/s due 0.3-2 s ahead) into a topic of a private three-broker Apache Kafka cluster
(tests/kafka_cluster.py: replication factor 3, min.insync.replicas 2) while a broker is
killed -9, stopped for 30 s, frozen for 10 s, or two of the three are stopped for 20 s
(the controller quorum and the in-sync replicas lose their majority); and the same load
without a fault, as the baseline.

Each scenario checks what the fault suite checks (tests/faults/verdict.py: nothing lost, none
early, no cancelled job fired, MySQL and Redis agree), that no job is recorded fired in
MySQL or marked acked in Redis without its record in Kafka, and that both nodes still
run at the end. It measures how long a partition received nothing, the worst lateness
overall and of the jobs due after the fault healed, and when the backlog of jobs due
before that had drained; it prints them and appends a row to
benchmarks/results/faults.jsonl (docs/guarantees.md has the results). The records read
are left in the test's tmp_path (records.jsonl) for a closer look.

The harness takes the nodes' settings and environment and the collector's consumer
options from a ``Delivery``, so every scenario can run again in another delivery mode:
add one to DELIVERIES.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from cluster import DelayClient
from cluster.connections.redis_conn import RedisClient
from cluster.devstack import stack
from cluster.model.envelope import murmur2, partition_of
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.faults.scenario import Run, Stage, scenario
from tests.faults.settle import write_row
from tests.faults.verdict import Ledger, Verdict, assert_safe
from tests.kafka_cluster import (  # the fixture kafka_cluster
    PARTITIONS,
    KafkaCluster,
    kafka_cluster_fixture,  # noqa: F401
)
from tests.processes import NodeProcess

# One worker runs the module: its Kafka cluster has ports of its own (tests/kafka_cluster.py).
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.xdist_group("kafka-cluster")]

LEAD_S = 2.0  # load before the fault
AFTER_HEAL_S = 5.0  # and after it healed, so that jobs come due on the healed cluster
SETTLE_TIMEOUT_S = 120.0
SCENARIO_TIMEOUT_S = 300  # a test's body; the longest (a 30 s stop) takes about 60 s


@dataclass(frozen=True)
class Delivery:
    """How the nodes publish: changes to the test's Settings (which the nodes and the
    collector get) and environment on top of tests/processes.py's FAST_FAILOVER; and how
    the collector reads: AIOKafkaConsumer options, e.g. isolation_level."""

    name: str
    node_env: dict[str, str] = field(default_factory=dict)
    consumer_options: dict[str, Any] = field(default_factory=dict)
    settings_changes: dict[str, Any] = field(default_factory=dict)


# Every scenario runs once per delivery mode; exactly-once is read as its users must
# read it, with isolation_level=read_committed, and must show no duplicate.
DELIVERIES = [
    Delivery("at-least-once"),
    Delivery(
        "exactly-once",
        {"DELAYQ_DELIVERY": "exactly_once"},
        {"isolation_level": "read_committed"},
    ),
]


def make_collector(settings: Settings, topic: str, options: dict[str, Any]) -> Collector:
    return Collector(settings, topic, **options)


def after_healing(records: list[dict[str, Any]], healed_ms: float) -> dict[str, float]:
    """Lateness (receive − due) of each job's first record: the worst and the 99th
    percentile of the jobs due after `healed_ms`, and when the last job due before it
    arrived, relative to it (negative: before it healed)."""
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(str(record["job_id"]), record)
    after = sorted(
        r["received_ms"] - r["due_ms"] for r in first.values() if r["due_ms"] >= healed_ms
    )
    before = [r["received_ms"] for r in first.values() if r["due_ms"] < healed_ms]
    return {
        "jobs_due_after_heal": len(after),
        "max_lateness_after_heal_ms": round(after[-1]) if after else 0,
        "p99_lateness_after_heal_ms": round(after[int(len(after) * 0.99)]) if after else 0,
        "backlog_drained_after_heal_ms": round(max(before) - healed_ms) if before else 0,
    }


def partition_of_key(key: bytes) -> int:
    """The partition a record of this key went to (Kafka's default partitioner)."""
    return partition_of(murmur2(key), list(range(PARTITIONS)))


def longest_gap(
    records: list[dict[str, Any]], keys: list[bytes], broke_ms: float
) -> dict[str, float]:
    """The longest time a partition received nothing from the moment the fault began
    (from its last record before): how long publishing to it stopped."""
    times: dict[int, list[float]] = {}
    for record, key in zip(records, keys, strict=True):
        times.setdefault(partition_of_key(key), []).append(record["received_ms"])
    gap, where = 0.0, -1
    for partition, received in times.items():
        received.sort()
        for earlier, later in itertools.pairwise(received):
            if later >= broke_ms and later - earlier > gap:
                gap, where = later - earlier, partition
    return {"longest_gap_ms": round(gap), "longest_gap_partition": where}


def dump_records(
    path: Path, records: list[dict[str, Any]], keys: list[bytes], broke_ms: float, healed_ms: float
) -> None:
    """Every record read (job, attempt, partition, due, fired and receive times) and
    the fault's times, for a closer look after a run (pytest keeps tmp_path)."""
    with path.open("wb") as out:
        out.write(orjson.dumps({"broke_ms": broke_ms, "healed_ms": healed_ms}) + b"\n")
        for record, key in zip(records, keys, strict=True):
            fields = ("job_id", "attempt", "due_ms", "fired_ms", "received_ms", "node")
            row = {name: record[name] for name in fields}
            row["partition"] = partition_of_key(key)
            out.write(orjson.dumps(row) + b"\n")


def error_kinds(lines: list[str]) -> Counter[str]:
    """Broker log ERROR lines by what they say, without their times and numbers."""
    return Counter(re.sub(r"\d+", "N", line.split("] ERROR ", 1)[-1])[:160] for line in lines)


SHARED_SERVICES = ("redis", "mysql", "zookeeper")


def shared_pids() -> dict[str, int | None]:
    """The pids of the shared stack's Redis, MySQL and ZooKeeper: a pid that changed
    during a scenario means someone else restarted that service meanwhile (another fault
    run on the same stack), which its figures then include."""
    return {name: stack.service_pid(name) for name in SHARED_SERVICES}


def node_log_problems(proc: NodeProcess) -> list[str]:
    """The ERROR and WARNING lines, and tracebacks, in a node's log."""
    try:
        lines = proc.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if "ERROR" in line or "WARNING" in line or "Traceback" in line]


# A fault breaks the cluster, waits, heals it, and returns what it did (for the row).
Fault = Callable[[KafkaCluster, str], Awaitable[dict[str, object]]]


@dataclass
class Outcome:
    result: Verdict
    ledger: Ledger
    row: dict[str, object]


async def kafka_scenario(
    name: str,
    cluster: KafkaCluster,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    tmp_path: Path,
    fault: Fault,
    delivery: Delivery,
    caplog: pytest.LogCaptureFixture,
) -> Outcome:
    """Two nodes on the cluster under steady load (the harness's scenario); `fault`
    after LEAD_S; the load goes on until AFTER_HEAL_S after it healed; then settle,
    judge and record this module's row."""
    began = time.monotonic()
    caplog.set_level(logging.WARNING, logger="aiokafka")
    healthy_s = await cluster.wait_healthy()
    ours = cluster.settings(settings).replace(**delivery.settings_changes)
    topic = await cluster.create_topic(ours)
    broker_errors = {name: len(cluster.log_lines(name)) for name in cluster.ports}
    pids_before = shared_pids()
    collector = make_collector(ours, topic, delivery.consumer_options)
    schedule_errors: list[str] = []
    collector_errors: list[str] = []
    struck: dict[str, Any] = {}  # what the fault did, and when it broke and healed

    async def strike(run: Run) -> None:
        struck["controller"] = cluster.active_controller()
        broke = time.monotonic()
        struck["broke_ms"] = time.time() * 1000
        struck["facts"] = await fault(cluster, topic)
        struck["healed_ms"] = time.time() * 1000
        struck["fault_s"] = time.monotonic() - broke

    try:
        await collector.start()
        # reading() goes on polling while it settles (a verdict takes a second or two,
        # which would otherwise count as the last records' lateness); the row is this
        # module's.
        result, ledger, run = await scenario(
            Stage(ours, client, redis, topic, collector, tmp_path),
            name,
            strike,
            node_env=delivery.node_env,
            load_after_fault_s=AFTER_HEAL_S,
            load_errors=schedule_errors,
            reader_errors=collector_errors,
            fault_at_s=LEAD_S,
            settle_timeout_s=SETTLE_TIMEOUT_S,
            reader_polls=True,
            final_tries=4,
            recorded=False,
        )
    finally:
        await collector.stop()
    exited = run.exited
    settle_s = run.marks["settled"] - run.marks["load_end"]
    pids_after = shared_pids()
    problems = {proc.name: node_log_problems(proc) for proc in run.procs}
    controller, facts = struck["controller"], struck["facts"]
    broke_ms, healed_ms, fault_s = struck["broke_ms"], struck["healed_ms"], struck["fault_s"]
    records: list[dict[str, Any]] = list(collector.records)
    dump_records(tmp_path / "records.jsonl", records, collector.keys, broke_ms, healed_ms)
    new_errors = {name: cluster.log_lines(name)[broker_errors[name] :] for name in cluster.ports}
    aiokafka_warnings = [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")]
    row: dict[str, object] = {
        "scenario": f"kafka-{name}",
        "delivery": delivery.name,
        **result.row(),
        "schedule_failed": ledger.schedule_failed,
        "schedule_unknown": ledger.schedule_unknown,
        "cancelled": len(ledger.cancelled),
        **facts,
        "controller": controller,
        "fault_s": round(fault_s, 1),
        **longest_gap(records, collector.keys, broke_ms),
        **after_healing(records, healed_ms),
        "settle_s": round(settle_s, 1),
        "healthy_before_s": round(healthy_s, 1),
        "wall_s": round(time.monotonic() - began, 1),
        "node_log_problems": sum(len(lines) for lines in problems.values()),
        "broker_log_errors": sum(len(lines) for lines in new_errors.values()),
        "aiokafka_warnings": len(aiokafka_warnings),
        "collector_errors": len(collector_errors),
        "shared_stack_restarted": [n for n in SHARED_SERVICES if pids_before[n] != pids_after[n]],
    }
    print(f"\n[kafka-{name} / {delivery.name}] {row}")
    print(
        f"  lost {len(result.lost)}, early {result.early}, duplicates {result.duplicates}, "
        f"acked not in Kafka {len(result.acked_not_in_kafka)}; publishing stopped for up to "
        f"{row['longest_gap_ms']} ms; worst lateness {row['max_lateness_ms']} ms overall, "
        f"{row['max_lateness_after_heal_ms']} ms after healing "
        f"(p99 {row['p99_lateness_after_heal_ms']} ms); backlog drained "
        f"{row['backlog_drained_after_heal_ms']} ms after healing; fault {row['fault_s']} s, "
        f"wall {row['wall_s']} s"
    )
    for proc_name, lines in problems.items():
        for line in lines[:5]:
            print(f"  {proc_name}: {line}")
    for broker, lines in new_errors.items():
        for kind, count in error_kinds(lines).most_common(3):
            print(f"  {broker}: {count} x {kind}")
    for message in sorted(set(aiokafka_warnings))[:5]:
        print(f"  aiokafka: {message}")
    for error in collector_errors[:3]:
        print(f"  collector: {error}")
    for error in schedule_errors[:3]:
        print(f"  schedule_many: {error}")
    write_row(row)
    assert not exited, f"nodes exited: {exited}"
    return Outcome(result, ledger, row)


def assert_kept(outcome: Outcome) -> None:
    """assert_safe, and nothing recorded fired or acked that Kafka did not take."""
    assert_safe(outcome.result, outcome.ledger)
    assert outcome.result.acked_not_in_kafka == []


# -- the faults ---------------------------------------------------------------------

KILL_DOWN_S = 10.0
STOP_DOWN_S = 30.0
FREEZE_S = 10.0  # past broker.session.timeout.ms (3 s)
QUORUM_DOWN_S = 20.0


async def no_fault(cluster: KafkaCluster, topic: str) -> dict[str, object]:
    """The baseline: the same load on a healthy cluster for as long as a short fault."""
    await asyncio.sleep(FREEZE_S)
    return {"broker": "-"}


async def kill_the_leader(cluster: KafkaCluster, topic: str) -> dict[str, object]:
    victim = await cluster.busiest_leader(topic)
    await cluster.kill(victim)
    await asyncio.sleep(KILL_DOWN_S)
    restart_s = await cluster.restart(victim)
    return {"broker": victim, "restart_s": round(restart_s, 1)}


async def stop_a_broker(cluster: KafkaCluster, topic: str) -> dict[str, object]:
    victim = await cluster.busiest_leader(topic)
    took = await cluster.stop(victim)
    await asyncio.sleep(STOP_DOWN_S)
    restart_s = await cluster.restart(victim)
    return {
        "broker": victim,
        "stop_s": round(abs(took[victim]), 1),
        "stop_needed_kill": took[victim] < 0,
        "restart_s": round(restart_s, 1),
    }


async def freeze_a_broker(cluster: KafkaCluster, topic: str) -> dict[str, object]:
    victim = await cluster.busiest_leader(topic)
    cluster.freeze(victim)
    try:
        await asyncio.sleep(FREEZE_S)
    finally:
        cluster.thaw(victim)
    return {"broker": victim}


async def lose_the_quorum(cluster: KafkaCluster, topic: str) -> dict[str, object]:
    """Stop two of the three nodes at once (each is a controller too): no quorum, and
    fewer in-sync replicas than min.insync.replicas."""
    leaders = await cluster.leaders(topic)
    led = {
        name: sum(1 for nid in leaders.values() if cluster.ids[name] == nid)
        for name in cluster.ports
    }
    victims = sorted(cluster.ports, key=lambda name: -led[name])[:2]
    took = await cluster.stop(*victims)
    await asyncio.sleep(QUORUM_DOWN_S)
    restart_s = await cluster.restart(*victims)
    return {
        "broker": "+".join(victims),
        "stop_s": round(max(abs(seconds) for seconds in took.values()), 1),
        "stop_needed_kill": any(seconds < 0 for seconds in took.values()),
        "restart_s": round(restart_s, 1),
    }


FAULTS: list[tuple[str, Fault]] = [
    ("steady", no_fault),
    ("kill-leader", kill_the_leader),
    ("stop-broker-30s", stop_a_broker),
    ("freeze-broker-10s", freeze_a_broker),
    ("quorum-lost-20s", lose_the_quorum),
]
# The longest scenarios run in one delivery mode in `make test` (each mode keeps one of
# them) and in both in `make faults`: about a minute each.
LONG_VARIANTS = {("stop-broker-30s", "exactly-once"), ("quorum-lost-20s", "at-least-once")}


@pytest.mark.timeout(SCENARIO_TIMEOUT_S)
@pytest.mark.parametrize(
    ("name", "fault", "delivery"),
    [
        pytest.param(
            name,
            fault,
            delivery,
            id=f"{name}-{delivery.name}",
            marks=[pytest.mark.long] if (name, delivery.name) in LONG_VARIANTS else [],
        )
        for name, fault in FAULTS
        for delivery in DELIVERIES
    ],
)
async def test_kafka_fault(
    name: str,
    fault: Fault,
    delivery: Delivery,
    kafka_cluster: KafkaCluster,
    settings: Settings,
    client: DelayClient,
    redis: RedisClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcome = await kafka_scenario(
        name, kafka_cluster, settings, client, redis, tmp_path, fault, delivery, caplog
    )
    assert_kept(outcome)
    if delivery.name == "exactly-once":
        assert outcome.result.duplicates == 0
