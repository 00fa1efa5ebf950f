"""delivery = exactly_once: a consumer reading with isolation_level=read_committed sees
every fired job once, also when a node is killed mid-publish (at every step of a
transaction), frozen past its ZooKeeper session (a zombie), or the broker is killed.

The fault scenarios are those of tests/test_faults.py with the nodes in exactly_once
mode and a read_committed consumer; each also asserts 0 duplicates, and its row in
benchmarks/results/faults.jsonl is named "eos-…".
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from actors.journal import parse_record
from actors.node import Node
from actors.transactions import transactional_id
from cluster import DelayClient, Job
from cluster.connections.kafka_conn import make_admin, make_consumer, start_client
from cluster.connections.redis_conn import RedisClient
from cluster.errors import ConfigError
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for
from tests.faults.scenario import Run, Stage, crash_at, down_for, scenario
from tests.faults.verdict import Ledger, Verdict, assert_safe

EXACTLY_ONCE = {"DELAYQ_DELIVERY": "exactly_once"}


def read_committed(settings: Settings, topic: str) -> Collector:
    return Collector(settings, topic, isolation_level="read_committed")


@pytest.fixture
async def committed(settings: Settings, topic: str) -> AsyncIterator[Collector]:
    collector = read_committed(settings, topic)
    await collector.start()
    yield collector
    await collector.stop()


def assert_once(result: Verdict, ledger: Ledger) -> None:
    assert_safe(result, ledger)
    assert result.duplicates == 0


def test_exactly_once_needs_idempotence() -> None:
    with pytest.raises(ConfigError, match="kafka_idempotence"):
        Settings(delivery="exactly_once", kafka_idempotence=False)
    with pytest.raises(ConfigError, match="delivery must be one of"):
        Settings(delivery="twice")


async def test_each_job_fires_once_in_a_committed_transaction(
    settings: Settings, client: DelayClient, topic: str, committed: Collector
) -> None:
    """A node in exactly_once mode fires every job once; the records are visible to a
    read_committed consumer, and the journal names each job in a transaction of its
    slot's producer."""
    # A journal of the test's own: on the shared one, a transaction another test's frozen
    # node left open holds back what a read_committed reader sees (its last stable offset).
    settings = settings.replace(kafka_journal_topic=f"journal.{settings.key_prefix}")
    node = Node(settings.replace(delivery="exactly_once"))
    await node.start()
    try:
        ids = await client.schedule_many(
            [Job(topic=topic, payload={"n": n}, delay=0.2) for n in range(300)]
        )

        async def all_fired() -> bool:
            await committed.poll()
            return len(committed.records) >= len(ids)

        assert await wait_for(all_fired, 60)
        transactions = node.parts.transactions if node.parts else None
        assert transactions is not None and transactions.committed_total >= 1
        assert transactions.aborted_total == 0
    finally:
        await node.stop()
    await committed.quiet_for(1.0)
    fired = Counter(str(r["job_id"]) for r in committed.records)
    assert sorted(fired) == sorted(ids)
    assert set(fired.values()) == {1}
    journalled = await journal_jobs(settings, since_ms=int(time.time() * 1000) - 120_000)
    assert set(ids) <= journalled


async def journal_jobs(settings: Settings, since_ms: int) -> set[str]:
    """Every job id the journal names for this cluster (its key prefix)."""
    consumer = make_consumer(settings, enable_auto_commit=False, isolation_level="read_committed")
    await start_client(consumer, settings)
    found: set[str] = set()
    try:
        journal = settings.kafka_journal_topic
        admin = make_admin(settings)
        await start_client(admin, settings)
        try:
            (described,) = await admin.describe_topics([journal])
        finally:
            await admin.close()
        partitions = [TopicPartition(journal, p["partition"]) for p in described["partitions"]]
        assert partitions, f"no journal topic {journal!r}"
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        starts = await consumer.offsets_for_times({tp: since_ms for tp in partitions})
        for tp in partitions:
            start = starts[tp]
            if start is None:
                consumer.seek(tp, ends[tp])
            else:
                consumer.seek(tp, start.offset)
        while any([await consumer.position(tp) < ends[tp] for tp in partitions]):
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for message in messages:
                    # Other tests plant records that are not the cluster's own.
                    entry = parse_record(message.value)
                    if entry is not None and entry["prefix"] == settings.key_prefix:
                        found.update(entry["jobs"])
    finally:
        await consumer.stop()
    return found


def test_each_slot_has_its_own_transactional_id(settings: Settings) -> None:
    ids = {transactional_id(settings, slot) for slot in range(settings.slots)}
    assert len(ids) == settings.slots
    assert all(settings.key_prefix in i for i in ids)


async def sigkill_a_node(run: Run) -> None:
    run.procs[0].signal(signal.SIGKILL)


async def freeze_a_node_past_its_session(run: Run) -> None:
    """A zombie: the node freezes mid-publish past its ZooKeeper session, the other takes
    its slots (and their transactional ids, fencing it), then it wakes up."""
    run.procs[0].signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(6.5)
    finally:
        run.procs[0].signal(signal.SIGCONT)


async def kill_the_broker(run: Run) -> None:
    """kill -9 of the broker mid-transaction; it restarts with its log 5 s later."""
    await down_for("kafka", 5, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.faults
class TestFaults:
    """The fault suite's scenarios in exactly_once mode: 0 lost, 0 early, 0 duplicates."""

    @pytest.mark.parametrize(
        ("name", "fault"),
        [
            ("eos-sigkill-node", sigkill_a_node),
            ("eos-zombie-node", freeze_a_node_past_its_session),
            pytest.param("eos-broker-killed", kill_the_broker, marks=pytest.mark.alone),
        ],
        ids=["sigkill-node", "zombie-node", "broker-killed"],
    )
    async def test_a_fault(
        self,
        name: str,
        fault: Callable[[Run], Awaitable[None]],
        settings: Settings,
        client: DelayClient,
        redis: RedisClient,
        topic: str,
        committed: Collector,
        tmp_path: Path,
    ) -> None:
        stage = Stage(settings, client, redis, topic, committed, tmp_path)
        result, ledger, _ = await scenario(stage, name, fault, node_env=EXACTLY_ONCE)
        assert_once(result, ledger)

    @pytest.mark.parametrize("failpoint", ["after-claim", "before-commit", "after-publish"])
    async def test_crash_at_failpoint(
        self,
        failpoint: str,
        settings: Settings,
        client: DelayClient,
        redis: RedisClient,
        topic: str,
        committed: Collector,
        tmp_path: Path,
    ) -> None:
        """A node dies at a step of a transaction: claimed, sent but not committed,
        committed but not acked. A second node takes over; nothing fires twice."""
        stage = Stage(settings, client, redis, topic, committed, tmp_path)
        result, ledger = await crash_at(stage, failpoint, f"eos-crash-{failpoint}", EXACTLY_ONCE)
        assert_once(result, ledger)
