"""The Kafka ingress (cluster/ingress/): record parsing, derived ids and error records as pure
functions, then against the real local stack: records in → jobs stored and fired,
malformed records to the error topic beside good ones scheduled, a record read twice is
one job, a process killed with SIGKILL mid-ingestion loses and duplicates nothing after
a restart, and MySQL cut off commits no offsets until the jobs are stored.

Every test produces its records from one producer: the local broker (Tansu) can make a
record visible out of order under concurrent producers, past a live consumer
(docs/ingress.md)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from actors.node import Node
from cluster import DelayClient
from cluster.client.delay_client import MAX_BATCH
from cluster.connections.kafka_conn import (
    connection_options,
    make_admin,
    make_consumer,
    start_client,
)
from cluster.devstack.nodes import NodeProcess, settings_env
from cluster.errors import ConfigError
from cluster.ingress.consumer import Ingress
from cluster.ingress.metrics import METRIC_NAMES, IngressMetricsServer
from cluster.ingress.records import (
    Accepted,
    Refused,
    derived_job_id,
    error_record,
    max_error_value_bytes,
    parse_record,
)
from cluster.ingress.startup import check_settings, error_topic_of
from cluster.model.jobs import check_job_id
from cluster.settings.config import Settings
from cluster.store.mysql_store import MySQLStore
from tests.conftest import Collector, wait_for
from tests.forwarder import free_port
from tests.mysql_tools import MySQLLinks, count_rows

# Once: the ingress's Redis side is the client's, tested against a Redis Cluster too.
pytestmark = pytest.mark.once

INGRESS_PARTITIONS = 3
NOW_MS = 1_795_000_000_000


# ----- pure: records, ids, error records ------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A consumed record as the ingress reads it (aiokafka's ConsumerRecord's fields)."""

    value: bytes | None
    key: bytes | None = None
    topic: str = "jobs.in"
    partition: int = 2
    offset: int = 41
    timestamp: int = NOW_MS - 5
    headers: Sequence[tuple[str, bytes]] = field(default_factory=tuple)


def job_value(**fields: Any) -> bytes:
    return orjson.dumps({"topic": "orders.close", "payload": {"order": 42}, **fields})


def test_a_derived_id_is_a_function_of_topic_partition_offset_and_timestamp() -> None:
    first = derived_job_id("jobs.in", 2, 41, NOW_MS)
    assert first == derived_job_id("jobs.in", 2, 41, NOW_MS)
    others = {
        derived_job_id("jobs.in2", 2, 41, NOW_MS),
        derived_job_id("jobs.in", 1, 41, NOW_MS),
        derived_job_id("jobs.in", 2, 42, NOW_MS),
        derived_job_id("jobs.in", 2, 41, NOW_MS + 1),
        derived_job_id("jobs.in", 2, 41, -1),  # no timestamp (old record format)
    }
    assert first not in others and len(others) == 5
    # Documented (docs/ingress.md), so other languages can compute it.
    assert (
        first
        == "kafka-"
        + __import__("hashlib").sha256(f"jobs.in:2:41:{NOW_MS}".encode()).hexdigest()[:32]
    )


def test_a_derived_id_is_a_valid_job_id_even_for_the_longest_topic() -> None:
    job_id = derived_job_id("t" * 249, 2**31 - 1, 2**63 - 1, 2**63 - 1)
    assert check_job_id(job_id) == job_id and len(job_id) == 38


def test_a_record_without_job_id_gets_the_derived_one() -> None:
    for value in (job_value(delay=30), job_value(delay=30, job_id=None)):
        outcome = parse_record(Record(value), Settings(), NOW_MS)
        assert isinstance(outcome, Accepted)
        assert outcome.job_id == derived_job_id("jobs.in", 2, 41, NOW_MS - 5)
        assert outcome.job == {
            "topic": "orders.close",
            "payload": {"order": 42},
            "delay": 30,
            "job_id": outcome.job_id,
        }


def test_a_record_keeps_its_own_fields() -> None:
    value = job_value(
        at="2026-11-24T09:00:00Z",
        job_id="order-42-close",
        biz_id="order-42",
        biz_type="close",
        max_attempts=3,
    )
    outcome = parse_record(Record(value), Settings(), NOW_MS)
    assert isinstance(outcome, Accepted)
    assert outcome.job_id == "order-42-close"
    assert outcome.job["at"] == dt.datetime(2026, 11, 24, 9, tzinfo=dt.UTC)
    assert outcome.job["biz_id"] == "order-42" and outcome.job["max_attempts"] == 3
    epoch = parse_record(Record(job_value(at=NOW_MS / 1000 + 60)), Settings(), NOW_MS)
    assert isinstance(epoch, Accepted) and epoch.job["at"] == NOW_MS / 1000 + 60


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "no value"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"{'topic': 1}", "not JSON"),
        (b"", "not JSON"),
        (b"[1, 2]", "must be a JSON object, got an array"),
        (b'"a job"', "must be a JSON object, got a string"),
        (b"null", "must be a JSON object, got null"),
        (job_value(delay=1, colour="red"), "unknown job fields: ['colour']"),
        (b'{"topic": "a", "delay": 1}', "needs 'topic' and 'payload'"),
        (job_value(), "exactly one of delay= (seconds) or at= (time)"),
        (job_value(delay=1, at=5), "exactly one of delay="),
        (job_value(delay=-1), "delay must be >= 0"),
        (job_value(at="tomorrow"), "RFC 3339"),
        (job_value(at="2026-11-24T09:00:00"), "UTC offset"),
        (job_value(delay=1, topic="no spaces"), "not a valid Kafka topic"),
        (job_value(delay=1, job_id="x" * 201), "job_id must be 1..200"),
        (job_value(delay=1, job_id="trailing "), "must not end with a space"),
        (job_value(delay=1, job_id=7), "job_id must be a str"),
        (job_value(delay=1, max_attempts=0), "max_attempts"),
        (job_value(delay=1, payload="x" * 70_000), "over payload_max_bytes"),
    ],
)
def test_a_malformed_record_is_refused_with_the_reason(value: bytes | None, reason: str) -> None:
    outcome = parse_record(Record(value), Settings(), NOW_MS)
    assert isinstance(outcome, Refused)
    assert reason in outcome.reason


def test_an_error_record_carries_the_reason_the_source_and_the_original() -> None:
    record = Record(b"[1, 2]", key="clé".encode())
    refused = parse_record(record, Settings(), NOW_MS)
    assert isinstance(refused, Refused)
    document = orjson.loads(error_record(refused, refused_ms=NOW_MS, max_value_bytes=1024))
    assert document == {
        "error": "a job must be a JSON object, got an array",
        "topic": "jobs.in",
        "partition": 2,
        "offset": 41,
        "timestamp": NOW_MS - 5,
        "key": "clé",
        "value": "[1, 2]",
        "refused_ms": NOW_MS,
    }


def test_an_error_record_gives_bytes_that_are_not_utf8_as_base64() -> None:
    raw = b"\x00\xffbinary"
    refused = parse_record(Record(raw, key=b"\xfe"), Settings(), NOW_MS)
    assert isinstance(refused, Refused)
    document = orjson.loads(error_record(refused, refused_ms=NOW_MS, max_value_bytes=1024))
    assert "value" not in document and "key" not in document
    assert base64.b64decode(document["value_base64"]) == raw
    assert base64.b64decode(document["key_base64"]) == b"\xfe"
    assert "not UTF-8" in document["error"]


def test_an_error_record_cuts_a_long_value_and_says_so() -> None:
    value = ("é" * 600).encode()  # 1,200 bytes; 1,000 would cut a character in two
    refused = Refused(Record(value), "too long")
    document = orjson.loads(error_record(refused, refused_ms=NOW_MS, max_value_bytes=1001))
    assert document["value"] == "é" * 500
    assert document["value_truncated"] is True and document["value_bytes"] == 1200
    assert document["key"] is None and "key_truncated" not in document
    tombstone = orjson.loads(
        error_record(Refused(Record(None), "no value"), refused_ms=NOW_MS, max_value_bytes=10)
    )
    assert tombstone["value"] is None


def test_an_error_record_fits_one_produce_request_whatever_the_value() -> None:
    settings = Settings()
    limit = max_error_value_bytes(settings)
    worst = b"\x01" * (2 * limit)  # JSON writes each as \u0001: six bytes
    refused = Refused(Record(worst, key=worst), "bad")
    record = error_record(refused, refused_ms=NOW_MS, max_value_bytes=limit)
    assert len(record) < settings.kafka_max_batch_bytes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({}, "ingress_topic is not set"),
        ({"ingress_topic": "bad topic"}, "ingress_topic: topic 'bad topic'"),
        ({"ingress_topic": "t" * 245}, "error topic"),
        ({"ingress_topic": "a", "ingress_error_topic": "a"}, "must differ"),
        ({"ingress_topic": "a", "ingress_batch": MAX_BATCH + 1}, "ingress_batch must be <="),
    ],
)
def test_settings_an_ingress_cannot_run_with(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        check_settings(Settings(**changes))


def test_the_error_topic_defaults_to_the_ingress_topic_dot_errors() -> None:
    assert error_topic_of(Settings(ingress_topic="jobs.in")) == "jobs.in.errors"
    named = Settings(ingress_topic="jobs.in", ingress_error_topic="bad.jobs")
    assert error_topic_of(named) == "bad.jobs"


# ----- against the local stack ------------------------------------------------------------


async def make_topic(settings: Settings, name: str, partitions: int) -> str:
    admin = make_admin(settings)
    try:
        await start_client(admin, settings)
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()
    return name


@pytest.fixture
async def ingress_settings(settings: Settings) -> Settings:
    """The test's settings with an ingress topic and error topic of its own, and a
    consumer group of its own."""
    name = f"test.in.{uuid.uuid4().hex[:10]}"
    await make_topic(settings, name, INGRESS_PARTITIONS)
    await make_topic(settings, f"{name}.errors", 1)
    return settings.replace(ingress_topic=name, ingress_group=f"test-ingress-{name}")


@contextlib.asynccontextmanager
async def ingress_running(settings: Settings) -> AsyncIterator[Ingress]:
    """An Ingress started and running in a task for the block, then stopped and closed."""
    ingress = Ingress(settings)
    await ingress.start()
    task = asyncio.create_task(ingress.run())
    try:
        yield ingress
    finally:
        ingress.stop()
        try:
            await asyncio.wait_for(task, 60)
        finally:
            await ingress.close()


@pytest.fixture
async def running_ingress(ingress_settings: Settings) -> AsyncIterator[Ingress]:
    async with ingress_running(ingress_settings) as ingress:
        yield ingress


async def produce(
    settings: Settings,
    topic: str,
    values: Iterable[bytes | None],
    keys: Iterable[bytes | None] | None = None,
    partition: int | None = None,
) -> list[tuple[int, int, int]]:
    """Produce the values (from one producer, acks=all; to `partition`, or as their keys
    say); returns (partition, offset, timestamp) of each, in order."""
    producer = AIOKafkaProducer(
        **connection_options(settings),
        acks="all",
        enable_idempotence=settings.kafka_idempotence,
        linger_ms=5,
    )
    await start_client(producer, settings)
    try:
        values = list(values)
        key_list = list(keys) if keys is not None else [None] * len(values)
        # Each record's own timestamp, given: the producer's answer carries its batch's.
        stamps = [int(time.time() * 1000) for _ in values]
        futures = [
            await producer.send(topic, value=value, key=key, partition=partition, timestamp_ms=ts)
            for value, key, ts in zip(values, key_list, stamps, strict=True)
        ]
        sent = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [(meta.partition, meta.offset, ts) for meta, ts in zip(sent, stamps, strict=True)]


async def read_topic(settings: Settings, topic: str, partitions: int) -> list[Any]:
    """Every record of a topic, read from the beginning to its end offsets."""
    consumer = make_consumer(settings, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    records: list[Any] = []
    try:
        await start_client(consumer, settings)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in tps]
            if all(at >= ends[tp] for at, tp in zip(positions, tps, strict=True)):
                break
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def committed(settings: Settings) -> dict[int, int]:
    """partition → the ingress group's committed offset (absent: none)."""
    admin = make_admin(settings)
    try:
        await start_client(admin, settings)
        # Naming the partitions: the local broker cannot answer for "all of them".
        offsets = await admin.list_consumer_group_offsets(
            settings.ingress_group,
            partitions=[
                TopicPartition(settings.ingress_topic, p) for p in range(INGRESS_PARTITIONS)
            ],
        )
    finally:
        await admin.close()
    return {
        tp.partition: meta.offset
        for tp, meta in offsets.items()
        if tp.topic == settings.ingress_topic and meta.offset >= 0
    }


def ends_of(placed: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """partition → the offset after the last of the records produced to it: where the
    group's commits end once every record is stored. (From the producer's answers: the
    local broker's ListOffsets gives the base offset of a partition's last batch + 1
    as its end, not the offset after its last record.)"""
    ends: dict[int, int] = {}
    for partition, offset, _ in placed:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


async def all_committed(settings: Settings, placed: Iterable[tuple[int, int, int]]) -> bool:
    return await committed(settings) == ends_of(placed)


async def job_count(store: MySQLStore) -> int:
    """Rows in every job table of the test's database."""
    return await count_rows(store)


async def stored(client: DelayClient, ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for first in range(0, len(ids), 5000):
        found |= set(await client.mysql.get_many(ids[first : first + 5000]))
    return found


def derived_ids(topic: str, placed: Iterable[tuple[int, int, int]]) -> list[str]:
    return [derived_job_id(topic, p, offset, ts) for p, offset, ts in placed]


async def test_records_become_jobs_that_fire_to_their_topics(
    ingress_settings: Settings,
    client: DelayClient,
    node: Node,
    topic: str,
    collector: Collector,
    running_ingress: Ingress,
) -> None:
    count = 60
    values = [
        orjson.dumps({"topic": topic, "payload": {"i": i}, "delay": 0.5 + i / 40})
        for i in range(count - 2)
    ]
    due = time.time() + 1.5
    values.append(
        orjson.dumps(
            {
                "topic": topic,
                "payload": "at as RFC 3339",
                "at": dt.datetime.fromtimestamp(due, dt.UTC).isoformat(),
                "job_id": "own-id-1",
                "biz_id": "order-7",
                "biz_type": "close",
            }
        )
    )
    values.append(orjson.dumps({"topic": topic, "payload": None, "at": due, "max_attempts": 2}))
    placed = await produce(ingress_settings, ingress_settings.ingress_topic, values)
    ids = derived_ids(ingress_settings.ingress_topic, placed)
    ids[count - 2] = "own-id-1"

    records = await collector.until(count, timeout_s=90)
    assert sorted(r["job_id"] for r in records) == sorted(ids)
    by_id = {r["job_id"]: r for r in records}
    assert by_id[ids[5]]["payload"] == {"i": 5}
    assert by_id["own-id-1"]["biz_id"] == "order-7" and by_id["own-id-1"]["biz_type"] == "close"
    assert by_id["own-id-1"]["due_ms"] == round(due * 1000)
    last = await client.get(ids[-1])
    assert last is not None and last.max_attempts == 2
    assert all(r["fired_ms"] >= r["due_ms"] for r in records)
    assert await wait_for(lambda: all_committed(ingress_settings, placed), timeout_s=30)
    assert running_ingress.records_total["scheduled"] == count


async def test_malformed_records_go_to_the_error_topic_and_the_good_ones_are_scheduled(
    ingress_settings: Settings, client: DelayClient, running_ingress: Ingress
) -> None:
    good = [orjson.dumps({"topic": "orders.close", "payload": i, "delay": 600}) for i in range(6)]
    bad: list[tuple[bytes | None, str]] = [
        (b"\xc3\x28 not utf-8", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[1, 2, 3]", "must be a JSON object, got an array"),
        (None, "no value"),
        (orjson.dumps({"topic": "orders.close", "payload": 1}), "exactly one of delay="),
        (orjson.dumps({"topic": "bad topic!", "payload": 1, "delay": 1}), "not a valid Kafka"),
        (orjson.dumps({"topic": "a", "payload": 1, "delay": 1, "extra": 1}), "unknown job"),
    ]
    # Good and bad records interleaved on one partition, so they share rounds.
    values = [value for pair in zip(good, [v for v, _ in bad], strict=False) for value in pair]
    values += [v for v, _ in bad[len(good) :]]
    keys = [b"k-\xff" if value == bad[0][0] else b"same-key" for value in values]
    placed = await produce(ingress_settings, ingress_settings.ingress_topic, values, keys, 1)
    where = dict(zip(values, placed, strict=True))

    assert await wait_for(lambda: all_committed(ingress_settings, placed), timeout_s=60)
    errors = await read_topic(ingress_settings, error_topic_of(ingress_settings), 1)
    assert len(errors) == len(bad)
    by_offset = {}
    for record in errors:
        document = orjson.loads(record.value)
        by_offset[document["offset"]] = (document, record)
    for value, reason in bad:
        partition, offset, timestamp = where[value]
        document, record = by_offset[offset]
        assert reason in document["error"]
        assert (document["topic"], document["partition"], document["timestamp"]) == (
            ingress_settings.ingress_topic,
            partition,
            timestamp,
        )
        if value is None:
            assert document["value"] is None
        elif value == bad[0][0]:
            assert base64.b64decode(document["value_base64"]) == value
            assert base64.b64decode(document["key_base64"]) == b"k-\xff"
            assert record.key == b"k-\xff"  # the original key, for the error topic too
        else:
            assert document["value"] == value.decode() and document["key"] == "same-key"

    good_ids = derived_ids(ingress_settings.ingress_topic, [where[v] for v in good])
    assert await stored(client, good_ids) == set(good_ids)
    assert await job_count(client.mysql) == len(good)
    assert running_ingress.records_total == {
        "scheduled": len(good),
        "already_there": 0,
        "invalid": len(bad),
    }


async def test_a_record_read_twice_is_one_job(
    ingress_settings: Settings, client: DelayClient
) -> None:
    values = [
        orjson.dumps({"topic": "orders.close", "payload": i, "delay": 600}) for i in range(200)
    ]
    # A job_id given twice, in one round, is one job too: the first record's.
    values += [
        orjson.dumps({"topic": "orders.close", "payload": "first", "delay": 600, "job_id": "dup"}),
        orjson.dumps({"topic": "orders.close", "payload": "second", "delay": 60, "job_id": "dup"}),
    ]
    placed = await produce(ingress_settings, ingress_settings.ingress_topic, values, [b"k"] * 202)
    ids = [*derived_ids(ingress_settings.ingress_topic, placed[:200]), "dup"]

    async with ingress_running(ingress_settings) as first:
        assert await wait_for(lambda: all_committed(ingress_settings, placed), timeout_s=60)
    assert first.records_total == {"scheduled": 201, "already_there": 1, "invalid": 0}
    assert await stored(client, ids) == set(ids)
    assert await job_count(client.mysql) == 201
    dup = await client.get("dup")
    assert dup is not None and orjson.loads(dup.payload_json) == "first"

    # Every record delivered again, as after a crash before the commit: a group that
    # has committed nothing reads the topic from the start.
    again = ingress_settings.replace(ingress_group=f"{ingress_settings.ingress_group}-again")
    async with ingress_running(again) as second:
        assert await wait_for(lambda: all_committed(again, placed), timeout_s=60)
    assert second.records_total == {"scheduled": 0, "already_there": 202, "invalid": 0}
    assert await job_count(client.mysql) == 201


async def test_mysql_unreachable_commits_nothing_and_the_jobs_are_stored_once_it_answers(
    ingress_settings: Settings, client: DelayClient
) -> None:
    # The ingress reaches MySQL through a forwarder that the test cuts.
    link = MySQLLinks(ingress_settings)  # one forwarder per MySQL server
    through = link.settings
    await link.open()
    try:
        async with ingress_running(through) as ingress:
            await link.cut()
            values = [
                orjson.dumps({"topic": "orders.close", "payload": i, "delay": 600})
                for i in range(500)
            ]
            placed = await produce(ingress_settings, ingress_settings.ingress_topic, values)
            ids = derived_ids(ingress_settings.ingress_topic, placed)

            async def failed_twice() -> bool:
                return ingress.store_failures_total >= 2

            assert await wait_for(failed_twice, timeout_s=60)
            assert await committed(ingress_settings) == {}
            assert await job_count(client.mysql) == 0

            await link.open()
            assert await wait_for(lambda: all_committed(ingress_settings, placed), timeout_s=60)
            assert await stored(client, ids) == set(ids)
            assert await job_count(client.mysql) == len(ids)
            assert ingress.records_total["scheduled"] + ingress.records_total[
                "already_there"
            ] == len(ids)
    finally:
        await link.cut()


async def test_a_rebalance_while_a_round_is_stuck_stores_each_record_once(
    ingress_settings: Settings, client: DelayClient
) -> None:
    """The first member is stuck on a round (its MySQL cut off) when a second joins the
    group and takes some partitions; once MySQL answers again, the first's stored round
    is committed or its commit refused, and the second reads what was not committed."""
    values = [
        orjson.dumps({"topic": "orders.close", "payload": i, "delay": 600}) for i in range(3000)
    ]
    placed = await produce(ingress_settings, ingress_settings.ingress_topic, values)
    ids = derived_ids(ingress_settings.ingress_topic, placed)
    small_rounds = ingress_settings.replace(ingress_batch=100)
    link = MySQLLinks(small_rounds)  # one forwarder per MySQL server
    cut_off = link.settings
    await link.open()
    try:
        async with ingress_running(cut_off) as first:

            async def first_committed_some() -> bool:
                return first.committed_rounds_total >= 2

            assert await wait_for(first_committed_some, timeout_s=60)
            await link.cut()

            async def first_stuck() -> bool:
                return first.store_failures_total >= 1

            assert await wait_for(first_stuck, timeout_s=60)
            second_settings = small_rounds.replace(node_id=f"{small_rounds.node_id}-b")
            async with ingress_running(second_settings) as second:

                async def second_working() -> bool:
                    return second.committed_rounds_total >= 1

                # The group rebalances; the second gets partitions and works on them.
                assert await wait_for(second_working, timeout_s=90)
                await link.open()
                assert await wait_for(lambda: all_committed(ingress_settings, placed), 120)
    finally:
        await link.cut()
    assert await stored(client, ids) == set(ids)
    assert await job_count(client.mysql) == len(ids)
    totals = first.records_total + second.records_total
    # A round one member stored and could not commit is read again by the other, and
    # found already there; two members may store the same ids at the same moment, and
    # neither then counts them as scheduled.
    assert totals["scheduled"] <= len(ids) <= totals["scheduled"] + totals["already_there"]
    assert totals["invalid"] == 0


async def test_the_metrics_count_records_by_result(
    ingress_settings: Settings, running_ingress: Ingress
) -> None:
    values = [orjson.dumps({"topic": "orders.close", "payload": 1, "delay": 600}), b"[]"]
    placed = await produce(ingress_settings, ingress_settings.ingress_topic, values, [b"k"] * 2)
    assert await wait_for(lambda: all_committed(ingress_settings, placed), timeout_s=60)
    server = IngressMetricsServer(
        ingress_settings.replace(metrics_port=free_port(), metrics_host="127.0.0.1"),
        running_ingress,
    )
    await server.start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{server.settings.metrics_port}/metrics") as answer,
        ):
            text = await answer.text()
    finally:
        await server.stop()
    assert 'delayq_ingress_records_total{result="scheduled"} 1.0' in text
    assert 'delayq_ingress_records_total{result="invalid"} 1.0' in text
    assert 'delayq_ingress_rounds_total{state="committed"}' in text
    exposed = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert {name for name in exposed if name.startswith("delayq_")} == METRIC_NAMES


# ----- the process -------------------------------------------------------------------------


def ingress_process(settings: Settings, log_dir: Path, name: str) -> NodeProcess:
    return NodeProcess(name, log_dir, settings=settings, node_id=name, command="ingress")


@pytest.mark.slow
async def test_an_ingress_killed_mid_ingestion_loses_and_duplicates_nothing(
    ingress_settings: Settings, client: DelayClient, tmp_path: Path
) -> None:
    count = 20_000
    values = [
        orjson.dumps({"topic": "orders.close", "payload": {"i": i}, "delay": 3600})
        for i in range(count)
    ]
    placed = await produce(ingress_settings, ingress_settings.ingress_topic, values)
    ids = derived_ids(ingress_settings.ingress_topic, placed)
    assert len(set(ids)) == count

    first = ingress_process(ingress_settings, tmp_path, "ingress-1")
    second: NodeProcess | None = None
    try:
        await first.wait_ready()

        async def some_stored() -> bool:
            return await job_count(client.mysql) >= 2000

        assert await wait_for(some_stored, timeout_s=120, interval_s=0.01)
        first.kill()  # SIGKILL, mid-ingestion
        at_kill = await job_count(client.mysql)
        assert at_kill < count, "the ingress had finished before it was killed"

        second = ingress_process(ingress_settings, tmp_path, "ingress-2")
        await second.wait_ready()
        assert await wait_for(lambda: all_committed(ingress_settings, placed), timeout_s=180)
        assert await second.stop() == 0
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert await stored(client, ids) == set(ids)
    assert await job_count(client.mysql) == count  # no job but the records' own


def cli_env(settings: Settings) -> dict[str, str]:
    return {**os.environ, **settings_env(settings)}


async def test_delayq_ingress_help_and_a_missing_topic() -> None:
    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    shown = await asyncio.to_thread(run, "ingress", "--help")
    assert shown.returncode == 0
    assert "ingress_topic" in shown.stdout and "--ready-file" in shown.stdout
    listed = await asyncio.to_thread(run, "--help")
    assert "ingress" in listed.stdout
    env = {k: v for k, v in os.environ.items() if k != "DELAYQ_INGRESS_TOPIC"}
    missing = await asyncio.to_thread(run, "ingress", env=env)
    assert missing.returncode == 2
    assert "ingress_topic is not set" in missing.stderr


async def test_sigterm_stops_an_idle_ingress_cleanly(
    ingress_settings: Settings, tmp_path: Path
) -> None:
    process = ingress_process(ingress_settings, tmp_path, "ingress-idle")
    try:
        info = await process.wait_ready()
        assert info["topic"] == ingress_settings.ingress_topic
        process.signal(signal.SIGTERM)
        assert await process.wait_exit() == 0
        assert not process.ready_path.exists()
    finally:
        process.kill()
