"""cluster/client/consumer.py: the Deduplicator's window and bound (pure), and FiredRecords over
real Kafka records delivered twice: a copy of a record on the topic, a seek back, the
next attempt of a job, and a record that is not delayq's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from actors.node import Node
from cluster import DelayClient
from cluster.client.consumer import Deduplicator, FiredRecord, FiredRecords
from cluster.connections.kafka_conn import (
    connection_options,
    make_admin,
    make_consumer,
    start_client,
)
from cluster.settings.config import Settings

# The consumer reads Kafka only.
pytestmark = pytest.mark.once


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_repeat_within_the_window_is_dropped() -> None:
    clock = Clock()
    dedupe = Deduplicator(window_s=10, clock=clock)
    assert dedupe.first("a", 1)
    assert not dedupe.first("a", 1)
    assert dedupe.first("a", 2)  # the next attempt is another key
    assert dedupe.first("b", 1)
    clock.now += 9.9
    assert not dedupe.first("a", 1)  # the window counts from the first delivery ...
    clock.now += 0.1
    assert dedupe.first("a", 1)  # ... and a repeat does not extend it
    assert (dedupe.passed, dedupe.dropped, dedupe.forgotten_early) == (4, 2, 0)
    assert len(dedupe) == 1  # a and b of the first second are forgotten


def test_per_job_drops_every_attempt_of_a_job() -> None:
    dedupe = Deduplicator(window_s=10, per_job=True, clock=Clock())
    assert dedupe.first("a", 1)
    assert not dedupe.first("a", 2)
    assert not dedupe.first("a", 1)
    assert dedupe.first("b", 2)


def test_the_bound_forgets_the_oldest_early_and_counts_it() -> None:
    clock = Clock()
    dedupe = Deduplicator(window_s=60, max_entries=3, clock=clock)
    for job_id in "abcd":
        assert dedupe.first(job_id, 1)
        clock.now += 1
    assert (len(dedupe), dedupe.forgotten_early) == (3, 1)
    assert dedupe.first("a", 1)  # forgotten before its window ended: passed again
    assert not dedupe.first("d", 1)


def test_forget_lets_the_next_delivery_through() -> None:
    dedupe = Deduplicator(clock=Clock())
    assert dedupe.first("a", 1)
    dedupe.forget("a", 1)
    dedupe.forget("never", 1)
    assert dedupe.first("a", 1)


@pytest.mark.parametrize(("window_s", "max_entries"), [(0, 10), (-1, 10), (10, 0)])
def test_bad_limits_are_refused(window_s: float, max_entries: int) -> None:
    with pytest.raises(ValueError):
        Deduplicator(window_s=window_s, max_entries=max_entries)


@pytest.fixture
async def one_partition(settings: Settings) -> str:
    """A topic of one partition: its records are delivered in the order written."""
    name = f"test.{uuid.uuid4().hex[:12]}"
    admin = make_admin(settings)
    try:
        await start_client(admin, settings)
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()
    return name


@pytest.fixture
async def producer(settings: Settings) -> AsyncIterator[AIOKafkaProducer]:
    raw = AIOKafkaProducer(**connection_options(settings), acks="all")
    await start_client(raw, settings)
    yield raw
    await raw.stop()


async def read(records: FiredRecords, until_job: str) -> list[FiredRecord]:
    """What FiredRecords hands out, up to the record of until_job."""
    got = []
    async for record in records:
        got.append(record)
        if record.job_id == until_job:
            return got
    raise AssertionError("the consumer stopped")


async def test_fired_records_drop_the_repeats_kafka_delivers(
    settings: Settings,
    client: DelayClient,
    one_partition: str,
    producer: AIOKafkaProducer,
) -> None:
    topic = one_partition
    partition = TopicPartition(topic, 0)
    node = Node(settings)
    await node.start()
    try:
        job_id = await client.schedule(topic, {"order": 42}, delay=0, biz_id="order-42")
        reader = make_consumer(settings, enable_auto_commit=False, fetch_max_wait_ms=5)
        await start_client(reader, settings)
        try:
            reader.assign([partition])
            await reader.seek_to_beginning(partition)
            original = await reader.getone()  # the node's record
        finally:
            await reader.stop()
    finally:
        await node.stop()
    value, headers = original.value, list(original.headers)
    # On the topic after the node's record: the same record again (a producer's retry
    # the broker had written), a record that is not delayq's, the job's next attempt (a
    # re-publish after a failure), and a last job to read up to.
    await producer.send_and_wait(topic, value, key=original.key, headers=headers)
    await producer.send_and_wait(topic, b"not json", key=b"x")
    next_attempt = orjson.dumps({**orjson.loads(value), "attempt": 2})
    await producer.send_and_wait(topic, next_attempt, key=original.key, headers=headers)
    await producer.send_and_wait(topic, _fired("last", 1), key=b"last")

    consumer = make_consumer(settings, enable_auto_commit=False, fetch_max_wait_ms=5)
    await start_client(consumer, settings)
    try:
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        dedupe = Deduplicator(window_s=600)
        records = FiredRecords(consumer, dedupe)
        got = await read(records, "last")
        assert [(r.job_id, r.attempt) for r in got] == [(job_id, 1), (job_id, 2), ("last", 1)]
        first = got[0]
        assert (first.payload, first.biz_id, first.topic) == ({"order": 42}, "order-42", topic)
        assert first.node == node.settings.node_id and first.message.offset == 0
        assert first.fired_ms >= first.due_ms
        assert (first.recurring, first.tick_ms) == (None, None)
        assert (dedupe.dropped, records.invalid) == (1, 1)
        # Kafka delivers it all again (a seek back, as after a rebalance before a
        # commit): every record is a repeat, and only a new one comes through.
        await consumer.seek_to_beginning(partition)
        await producer.send_and_wait(topic, _fired("after", 1), key=b"after")
        assert [r.job_id for r in await read(records, "after")] == ["after"]
        assert (dedupe.dropped, records.invalid) == (5, 2)
        # With per_job, the next attempt of a job is a repeat too.
        await consumer.seek_to_beginning(partition)
        per_job = FiredRecords(consumer, Deduplicator(per_job=True))
        got = await read(per_job, "after")
        assert [(r.job_id, r.attempt) for r in got] == [(job_id, 1), ("last", 1), ("after", 1)]
    finally:
        await consumer.stop()


def _fired(job_id: str, attempt: int) -> bytes:
    return orjson.dumps(
        {
            "job_id": job_id,
            "topic": "t",
            "biz_id": None,
            "biz_type": None,
            "payload": None,
            "due_ms": 1,
            "fired_ms": 2,
            "attempt": attempt,
        }
    )
