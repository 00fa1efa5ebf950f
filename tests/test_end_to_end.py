"""schedule → node → Kafka, with a node running in this process."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import Counter
from typing import Any

from aiokafka.protocol.metadata import MetadataRequest

from actors.node import Node
from actors.publisher import make_producer
from cluster import ChangeStatus, DelayClient, Job, JobStatus
from cluster.connections.kafka_conn import broker_answers, start_client
from cluster.connections.redis_conn import RedisClient
from cluster.model.keys import KeySpace, slot_of
from cluster.scripts.facade import ClaimResult, Scripts
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for


async def test_job_fires_to_kafka_with_its_record(
    client: DelayClient, node: Node, topic: str, collector: Collector
) -> None:
    job_id = await client.schedule(
        topic, {"order": 42, "text": "日本"}, delay=0.3, biz_id="order-42", biz_type="close"
    )
    [record] = await collector.until(1, timeout_s=30)
    assert collector.keys == [b"order-42"]
    assert record["job_id"] == job_id
    assert record["topic"] == topic
    assert record["biz_id"] == "order-42" and record["biz_type"] == "close"
    assert record["payload"] == {"order": 42, "text": "日本"}
    assert record["attempt"] == 1
    assert record["fired_ms"] >= record["due_ms"]  # type: ignore[operator]
    assert record["received_ms"] >= record["due_ms"]  # type: ignore[operator]

    async def recorded() -> bool:
        got = await client.get(job_id)
        return got is not None and got.status == JobStatus.FIRED

    assert await wait_for(recorded, timeout_s=10)
    history = await client.mysql.history(job_id)
    assert [(h["status"], h["node"]) for h in history] == [(2, node.settings.node_id)]


async def test_past_due_time_fires_at_once(
    client: DelayClient, node: Node, topic: str, collector: Collector
) -> None:
    job_id = await client.schedule(topic, "late", at=1_000_000_000)
    [record] = await collector.until(1, timeout_s=30)
    assert record["job_id"] == job_id


async def test_cancelled_job_never_fires(
    client: DelayClient, node: Node, topic: str, collector: Collector
) -> None:
    # "drop" would fire before "keep": seconds of margin for the cancel to land.
    drop = await client.schedule(topic, "drop", delay=2.0)
    keep = await client.schedule(topic, "keep", delay=2.5)
    assert await client.cancel(drop)
    await collector.until(1, timeout_s=30)
    await collector.quiet_for(1.0)
    assert [r["job_id"] for r in collector.records] == [keep]
    assert (await client.cancel(keep)).status == ChangeStatus.ALREADY_FIRED


async def test_reschedule_moves_the_fire_time(
    client: DelayClient, node: Node, topic: str, collector: Collector
) -> None:
    sooner = await client.schedule(topic, "sooner", delay=3600)
    later = await client.schedule(topic, "later", delay=2.0)  # would fire first if kept
    assert await client.reschedule(later, delay=3600)
    assert await client.reschedule(sooner, delay=2.5)
    await collector.until(1, timeout_s=30)
    await collector.quiet_for(1.0)
    assert [r["job_id"] for r in collector.records] == [sooner]
    record = await client.get(later)
    assert record is not None and record.status == JobStatus.PENDING


async def test_ten_thousand_jobs_fire_exactly_once_and_never_early(
    client: DelayClient, node: Node, topic: str, collector: Collector
) -> None:
    rng = random.Random(7)
    jobs = [Job(topic, {"i": i}, delay=rng.uniform(0.5, 4.0)) for i in range(10_000)]
    ids: list[str] = []
    for start in range(0, len(jobs), 2000):
        ids += await client.schedule_many(jobs[start : start + 2000])
    records = await collector.until(10_000, timeout_s=120)
    await collector.quiet_for(0.5)
    fired = Counter(str(r["job_id"]) for r in records)
    assert set(fired) == set(ids)
    assert max(fired.values()) == 1
    early = [r for r in records if r["fired_ms"] < r["due_ms"]]  # type: ignore[operator]
    assert early == []

    async def all_recorded() -> bool:
        rows = await client.mysql.get_many(ids)
        return all(row.status == JobStatus.FIRED for row in rows.values())

    assert await wait_for(all_recorded, timeout_s=60, interval_s=0.5)


async def test_jobs_claimed_ahead_are_published_at_their_due_time(
    settings: Settings, client: DelayClient, redis: RedisClient, topic: str, collector: Collector
) -> None:
    """With the largest fire advance a job is claimed (in flight) up to a second before
    it is due, yet published only once the Redis clock has passed its due time."""
    node = Node(dataclasses.replace(settings, fire_advance_ms=1000))
    await node.start()
    try:
        watched = await client.schedule(topic, "watched", delay=2.0)
        jobs = [Job(topic, {"i": i}, delay=1.0 + i / 100) for i in range(300)]
        ids = [watched, *await client.schedule_many(jobs)]
        inflight = KeySpace(settings.key_prefix).slot(slot_of(watched, settings.slots)).inflight
        row = await client.get(watched)
        assert row is not None

        async def in_flight_before_due() -> bool:
            seconds, micros = await redis.time()
            redis_ms = seconds * 1000 + micros // 1000
            return redis_ms < row.due_ms and await redis.zscore(inflight, watched) is not None

        assert await wait_for(in_flight_before_due, timeout_s=30, interval_s=0.01)
        records = await collector.until(len(ids), timeout_s=60)
    finally:
        await node.stop()
    assert sorted(str(r["job_id"]) for r in records) == sorted(ids)
    early = [r for r in records if r["fired_ms"] < r["due_ms"]]  # type: ignore[operator]
    assert early == []
    received_early = [r for r in records if r["received_ms"] < r["due_ms"]]  # type: ignore[operator]
    assert received_early == []


async def test_injection_looking_fields_fire_and_record_verbatim(
    client: DelayClient, node: Node, topic: str, collector: Collector
) -> None:
    job_id = f"x'); DROP TABLE job_0000; -- \\' \" redis.call('FLUSHALL') 订单 {uuid.uuid4()}"
    biz_id = "'; SELECT SLEEP(10); --"
    await client.schedule(
        topic, {"q": "' OR 1=1 --"}, delay=0.1, job_id=job_id, biz_id=biz_id, biz_type="\\\\"
    )
    [record] = await collector.until(1, timeout_s=30)
    assert (record["job_id"], record["biz_id"], record["biz_type"]) == (job_id, biz_id, "\\\\")
    assert collector.keys == [biz_id.encode()]

    async def recorded() -> bool:
        got = await client.get(job_id)
        return got is not None and got.status == JobStatus.FIRED

    assert await wait_for(recorded, timeout_s=10)
    [entry] = await client.mysql.history(job_id)
    assert entry["status"] == JobStatus.FIRED


async def test_jobs_in_flight_on_a_dead_node_are_retried(
    client: DelayClient, settings: Settings, scripts: Scripts, topic: str, collector: Collector
) -> None:
    """A node claimed jobs and died before publishing: the reaper of the next node
    returns them after their deadline, and they fire as attempt 2."""
    ids = await client.schedule_many([Job(topic, i, delay=0) for i in range(20)])
    slots = sorted({slot_of(job_id, settings.slots) for job_id in ids})
    await scripts.move_many([(slot, 0) for slot in slots], 100)
    # The "dead node": claims everything with a 300 ms deadline.
    claims = await scripts.claim_many([(slot, 0) for slot in slots], 100, 300)
    assert sum(len(claim.jobs) for claim in claims if isinstance(claim, ClaimResult)) == 20
    node = Node(settings.replace(retry_backoff_ms=50, reap_interval_ms=100))
    await node.start()
    try:
        records = await collector.until(20, timeout_s=30)
        await collector.quiet_for(0.5)
    finally:
        await node.stop()
    assert sorted(str(r["job_id"]) for r in records) == sorted(ids)
    assert {r["attempt"] for r in records} == {2}
    history = await client.mysql.history(ids[0])
    assert [(h["status"], h["attempt"], h["note"]) for h in history] == [
        (JobStatus.FIRING, 1, "in-flight deadline passed"),
        (JobStatus.FIRED, 2, None),
    ]
    record = await client.get(ids[0])
    assert record is not None and (record.status, record.attempts) == (JobStatus.FIRED, 2)


async def test_a_cancel_of_a_never_scheduled_id_does_not_delay_its_schedule(
    client: DelayClient, node: Node, topic: str, collector: Collector
) -> None:
    """The cancel's tombstone used to refuse the schedule's Redis add: the job fired
    marker_retention_ms late, or at the next full reconcile pass."""
    job_id = f"never-{uuid.uuid4().hex}"
    assert (await client.cancel(job_id)).status == ChangeStatus.NOT_FOUND
    assert await client.schedule(topic, "on time", delay=1, job_id=job_id) == job_id
    [record] = await collector.until(1, timeout_s=30)
    assert record["job_id"] == job_id


async def test_the_broker_check_asks_for_no_topic(settings: Settings, topic: str) -> None:
    # The node checks Kafka every second; asking for every topic would decode the whole
    # broker's metadata each time (thousands of topics on a shared broker).
    producer = make_producer(settings)
    await start_client(producer, settings)
    asked: list[list[str] | None] = []  # the topics of each metadata request it sends
    send = producer.client.send

    async def watched(node_id: int, request: Any, **options: Any) -> Any:
        if isinstance(request, MetadataRequest):
            asked.append(request._topics)  # None: every topic
        return await send(node_id, request, **options)

    try:
        producer.client.send = watched
        assert await broker_answers(producer.client)
        assert asked == [[]]
        producer.client.send = send

        async def a_full_refresh_lists_it() -> bool:  # what the check was before
            await producer.client.force_metadata_update()
            return topic in producer.client.cluster.topics()

        # A topic just created reaches every broker's metadata a moment later.
        assert await wait_for(a_full_refresh_lists_it, timeout_s=30)
    finally:
        await producer.stop()
