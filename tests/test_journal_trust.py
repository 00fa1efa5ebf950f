"""delivery = exactly_once: the journal counts only the cluster's own records. A record
some other writer of the journal topic put there, outside the slot's transactions (a
forged one naming a job, or one that is not a journal record at all), never makes an
undelivered job count as delivered and never stops a lookup: the job whose transaction
failed is retried and delivered once, and the record is skipped and counted.

Each test fences the slot's producer (InitProducerId with the slot's transactional id,
as a second owner would) after planting the record, so that the node's next
transaction of the slot fails with an unknown outcome and is settled with the journal.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import orjson
import pytest

from actors.journal import Journal, parse_record
from actors.node import Node
from actors.publisher import make_producer
from actors.transactions import SlotTransactions, transactional_id
from cluster import DelayClient
from cluster.connections.kafka_conn import start_client
from cluster.connections.redis_conn import open_redis
from cluster.model.contract import JobStatus
from cluster.model.keys import slot_of
from cluster.settings.config import Settings
from tests.conftest import Collector, wait_for

pytestmark = pytest.mark.once


@pytest.fixture
async def committed(settings: Settings, topic: str) -> AsyncIterator[Collector]:
    collector = Collector(settings, topic, isolation_level="read_committed")
    await collector.start()
    yield collector
    await collector.stop()


def ids_in_one_slot(settings: Settings, count: int) -> list[str]:
    """`count` fresh job ids that share one slot."""
    first = f"trust-{uuid.uuid4().hex[:10]}"
    slot = slot_of(first, settings.slots)
    ids = [first]
    while len(ids) < count:
        candidate = f"trust-{uuid.uuid4().hex[:10]}"
        if slot_of(candidate, settings.slots) == slot:
            ids.append(candidate)
    return ids


async def fired(committed: Collector, job_id: str, timeout_s: float = 60) -> bool:
    async def seen() -> bool:
        await committed.poll()
        return any(record["job_id"] == job_id for record in committed.records)

    return await wait_for(seen, timeout_s)


async def plant_and_fence(
    settings: Settings, transactions: SlotTransactions, slot: int, value: bytes
) -> None:
    """Write `value` to the slot's journal partition outside any transaction, then
    fence the slot's producer (a producer started with its transactional id)."""
    journal = transactions.journal
    plain = make_producer(settings)
    await start_client(plain, settings)
    try:
        await plain.send_and_wait(
            journal.topic, value, key=str(slot).encode(), partition=journal.partition_of(slot)
        )
    finally:
        await plain.stop()
    fencer = make_producer(settings, transactional_id(settings, slot))
    await start_client(fencer, settings)
    await fencer.stop()


async def fire_past_a_planted_record(
    settings: Settings, client: DelayClient, topic: str, committed: Collector, forged: bytes | None
) -> SlotTransactions:
    """A node fires a warm-up job of a slot (its producer of the slot is then open);
    a record is planted in the slot's journal partition and the producer fenced; then
    the victim, due at once, must still be delivered exactly once."""
    warm_up, victim = ids_in_one_slot(settings, 2)
    slot = slot_of(victim, settings.slots)
    node = Node(settings.replace(delivery="exactly_once"))
    await node.start()
    try:
        assert node.parts is not None and node.parts.transactions is not None
        transactions = node.parts.transactions
        await client.schedule(topic, {}, delay=0, job_id=warm_up)
        assert await fired(committed, warm_up)
        value = forged if forged is not None else b""
        if forged is None:  # a record naming the victim, as a node's would but forged
            value = orjson.dumps(
                {
                    "slot": slot,
                    "epoch": transactions.ownership.epoch(slot),
                    "node": "not-a-node",
                    "prefix": settings.key_prefix,
                    "jobs": [victim],
                    "mac": "0" * 64,
                }
            )
        await plant_and_fence(settings, transactions, slot, value)
        await client.schedule(topic, {}, delay=0, job_id=victim)
        assert await fired(committed, victim), "the victim was never delivered"
        await committed.quiet_for(1.0)
        victims = [record for record in committed.records if record["job_id"] == victim]
        assert len(victims) == 1
        assert victims[0]["attempt"] == 2  # the fenced attempt was found not committed

        async def recorded_fired() -> bool:
            record = await client.get(victim)
            return record is not None and record.status == JobStatus.FIRED

        assert await wait_for(recorded_fired, 30)
        return transactions
    finally:
        await node.stop()


async def test_a_forged_record_makes_no_job_count_as_delivered(
    settings: Settings, client: DelayClient, topic: str, committed: Collector
) -> None:
    transactions = await fire_past_a_planted_record(settings, client, topic, committed, forged=None)
    assert transactions.journal.skipped["unauthenticated"] >= 1


async def test_a_record_that_is_not_json_stops_no_retry(
    settings: Settings, client: DelayClient, topic: str, committed: Collector
) -> None:
    transactions = await fire_past_a_planted_record(
        settings, client, topic, committed, forged=b"this is not JSON"
    )
    assert transactions.journal.skipped["unreadable"] >= 1


def test_only_records_of_the_written_shape_parse() -> None:
    good = {"slot": 1, "epoch": 2, "prefix": "dq", "jobs": ["a"], "mac": "00"}
    assert parse_record(orjson.dumps(good)) == good
    for bad in (
        b"",
        b"not json",
        b"[1, 2]",
        b"null",
        orjson.dumps({**good, "slot": "1"}),
        orjson.dumps({**good, "slot": True}),
        orjson.dumps({**good, "jobs": "a"}),
        orjson.dumps({**good, "jobs": [1]}),
        orjson.dumps({k: v for k, v in good.items() if k != "mac"}),
        orjson.dumps({**good, "barrier": 5}),
    ):
        assert parse_record(bad) is None, bad
    assert parse_record(None) is None


async def test_a_record_is_accepted_only_under_the_clusters_key(settings: Settings) -> None:
    """Two journals of one cluster share the key kept in Redis; a record written under
    another key (another cluster's, or a guess) is refused."""
    redis = await open_redis(settings)
    try:
        ours, again = Journal(settings), Journal(settings)
        await ours.load_key(redis)
        await again.load_key(redis)
        record = ours.record(3, 7, [b"job-a", b"job-b"])
        assert again._accepted(3, record, 3, 0) is not None
        assert again._accepted(4, record, 4, 0) is None  # another slot's: not ours to read
        stranger = Journal(settings.replace(key_prefix=f"{settings.key_prefix}x"))
        await stranger.load_key(redis)
        foreign = orjson.loads(stranger.record(3, 7, [b"job-a"]))
        foreign["prefix"] = settings.key_prefix  # claims to be ours, signed by another key
        assert again._accepted(3, orjson.dumps(foreign), 3, 1) is None
        assert again.skipped == {"unreadable": 0, "unauthenticated": 1}
        await redis.delete(f"{{{stranger.settings.key_prefix}:journal}}:key")
    finally:
        await redis.aclose()
