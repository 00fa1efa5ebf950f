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
from cluster.envelope import Fire, murmur2


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


class Cluster:
    def __init__(self, known: dict[str, set[int]]) -> None:
        self.known = known

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.known.get(topic)


class Client:
    def __init__(self, known: dict[str, set[int]]) -> None:
        self.cluster = Cluster(known)


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
    assert futures[0].done() and futures[2].done()
    assert not futures[1].done()  # waiting for the topic's metadata, in the background
    assert {topic for topic, _, _ in producer.sent} == {"known"}
    producer.metadata.set_result({0})
    assert await futures[1] == ("new", 0)
    assert ("new", 0, [b'{"n":2}']) in producer.sent


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
