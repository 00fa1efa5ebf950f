"""Publisher logic with a stand-in producer (pure logic: no broker involved).

The local broker creates any topic the moment it is named, so the case it cannot show
is tested here: a topic whose metadata does not arrive must not hold up the others.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import UnknownTopicOrPartitionError

from actors.publisher import Publisher
from cluster.errors import LeaseLapsed
from cluster.model.envelope import Fire, murmur2


class Batch:
    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.closed = False

    def append(self, *, key: bytes, value: bytes, timestamp: None, headers: Any) -> object:
        assert not self.closed, "appended to a batch already handed to the producer"
        self.values.append(value)
        return object()

    def close(self) -> None:
        self.closed = True

    def record_count(self) -> int:
        return len(self.values)


class Cluster:
    def __init__(self, known: dict[str, set[int]]) -> None:
        self.known = known

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.known.get(topic)


class Client:
    def __init__(self, known: dict[str, set[int]]) -> None:
        self.cluster = Cluster(known)
        self.tracked: list[str] = []  # topics named in metadata refreshes, in order

    def add_topic(self, topic: str) -> None:
        self.tracked.append(topic)


class StandInProducer:
    """Topics in `known` have metadata; others wait for `metadata` (or fail)."""

    def __init__(self, known: dict[str, set[int]]) -> None:
        self.client = Client(known)
        self.metadata: asyncio.Future[set[int]] = asyncio.get_running_loop().create_future()
        self.sent: list[tuple[str, int, list[bytes]]] = []

    def create_batch(self) -> Batch:
        return Batch()

    async def partitions_for(self, topic: str) -> set[int]:
        partitions = await self.metadata
        self.client.cluster.known[topic] = partitions
        return partitions

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> Any:
        assert batch.closed, "an open batch would wait out linger_ms before it is sent"
        self.sent.append((topic, partition, batch.values))
        done = asyncio.get_running_loop().create_future()
        done.set_result((topic, partition))
        return done


def fire(topic: str, n: int) -> Fire:
    key = b"k%d" % n
    return Fire(topic, key, murmur2(key), b'{"n":%d}' % n, 0)


async def test_records_of_a_topic_without_metadata_do_not_hold_up_the_others() -> None:
    producer = StandInProducer({"known": {0, 1}})
    publisher = Publisher(producer, "node", 1_000_000)  # type: ignore[arg-type]
    futures = await publisher.publish([fire("known", 1), fire("new", 2), fire("known", 3)])
    assert (await futures[0])[0] == (await futures[2])[0] == "known"
    assert not futures[1].done()  # waiting for the topic's metadata, in the background
    assert {topic for topic, _, _ in producer.sent} == {"known"}
    producer.metadata.set_result({0})
    assert await futures[1] == ("new", 0)
    assert ("new", 0, [b'{"n":2}']) in producer.sent


async def test_a_topic_already_in_the_metadata_is_named_in_the_refreshes_once() -> None:
    # Its partitions came with a refresh of every topic: publishing must still have the
    # producer track it, or every refresh keeps asking for every topic on the broker.
    producer = StandInProducer({"known": {0}, "other": {0}})
    publisher = Publisher(producer, "node", 1_000_000)  # type: ignore[arg-type]
    for _ in range(2):
        futures = await publisher.publish([fire("known", 1), fire("other", 2)])
        await asyncio.gather(*futures)
    assert producer.client.tracked == ["known", "other"]


async def test_a_topic_whose_metadata_fails_fails_only_its_records() -> None:
    producer = StandInProducer({"known": {0}})
    publisher = Publisher(producer, "node", 1_000_000)  # type: ignore[arg-type]
    futures = await publisher.publish([fire("missing", 1), fire("known", 2)])
    producer.metadata.set_exception(UnknownTopicOrPartitionError())
    with pytest.raises(UnknownTopicOrPartitionError):
        await futures[0]
    assert await futures[1] == ("known", 0)


async def test_a_record_over_the_size_limit_fails_alone() -> None:
    producer = StandInProducer({"t": {0}})
    publisher = Publisher(producer, "node", 20)  # type: ignore[arg-type]
    big = Fire("t", b"k", murmur2(b"k"), b"x" * 50, 0)
    futures = await publisher.publish([big, fire("t", 1)])
    with pytest.raises(Exception, match="over the 20-byte limit"):
        await futures[0]
    assert await futures[1] == ("t", 0)


class SlowProducer(StandInProducer):
    """Takes a partition's next batch only once the test lets its previous one go, as a
    producer with one request in flight per broker does."""

    def __init__(self, known: dict[str, set[int]]) -> None:
        super().__init__(known)
        self.gate = asyncio.Event()

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> Any:
        if self.sent:
            await self.gate.wait()
        return await super().send_batch(batch, topic, partition=partition)


async def test_records_queued_while_a_batch_waits_go_out_together() -> None:
    """Records of several publish() calls that arrive while their partition's previous
    batch has not gone out yet share the next batch, and each call's future is settled
    by the batch its records went into."""
    producer = SlowProducer({"t": {0}})
    publisher = Publisher(producer, "node", 1_000_000)  # type: ignore[arg-type]
    first = await publisher.publish([fire("t", 1)])
    assert await first[0] == ("t", 0)
    waiting = await publisher.publish([fire("t", 2)])  # its batch waits at the gate
    await asyncio.sleep(0.01)
    later = [await publisher.publish([fire("t", n)]) for n in (3, 4, 5)]
    assert not waiting[0].done() and not any(f[0].done() for f in later)
    producer.gate.set()
    assert await waiting[0] == ("t", 0)
    assert [await f[0] for f in later] == [("t", 0)] * 3
    assert [values for _, _, values in producer.sent] == [
        [b'{"n":1}'],
        [b'{"n":2}'],
        [b'{"n":3}', b'{"n":4}', b'{"n":5}'],
    ]


async def test_close_cancels_what_is_still_queued() -> None:
    producer = SlowProducer({"t": {0}})
    publisher = Publisher(producer, "node", 1_000_000)  # type: ignore[arg-type]
    await (await publisher.publish([fire("t", 1)]))[0]
    blocked = await publisher.publish([fire("t", 2)])
    await asyncio.sleep(0.01)
    queued = await publisher.publish([fire("t", 3)])
    await publisher.close()
    assert blocked[0].cancelled() and queued[0].cancelled()


async def test_records_queued_when_the_lease_lapses_are_not_handed_over() -> None:
    """A node that froze while records waited for their partition's batch wakes with
    its lease run out: what it had queued fails with LeaseLapsed instead of being sent,
    and sending resumes once the lease is confirmed again."""
    producer = SlowProducer({"t": {0}})
    leased = True
    publisher = Publisher(producer, "node", 1_000_000, lambda: leased)  # type: ignore[arg-type]
    first = await publisher.publish([fire("t", 1)])
    assert await first[0] == ("t", 0)
    waiting = await publisher.publish([fire("t", 2)])  # its batch waits at the gate
    await asyncio.sleep(0.01)
    queued = await publisher.publish([fire("t", 3)])
    leased = False
    producer.gate.set()
    assert await waiting[0] == ("t", 0)  # handed over before the lease lapsed
    with pytest.raises(LeaseLapsed):
        await queued[0]
    leased = True
    assert await (await publisher.publish([fire("t", 4)]))[0] == ("t", 0)
    assert [values for _, _, values in producer.sent] == [
        [b'{"n":1}'],
        [b'{"n":2}'],
        [b'{"n":4}'],
    ]
