"""Publishes a round of fired jobs to Kafka as one record batch per topic partition.

aiokafka's per-record send() creates a future and takes a lock per record; for a round
of hundreds of jobs it is cheaper to fill one BatchBuilder per (topic, partition) and
submit each batch once. Records are partitioned by key with Kafka's default murmur2
partitioner, so a key lands on the same partition as with any other Kafka producer.
Every job gets the future of the batch it went into. Each record carries the header
"delayq-node" naming the node that published it.

publish() never waits for the broker's metadata of a topic it has not seen yet (that
wait can last the whole request timeout when the topic does not exist): records of such
a topic are sent by a task of their own once the metadata arrives, so a poison topic
never holds up the others.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError

from cluster.envelope import Fire, partition_of


def _failed(exc: BaseException) -> asyncio.Future[object]:
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


def _sent(future: asyncio.Future[object] | None) -> asyncio.Future[object]:
    """A record's future, or a failed one for a record that was never handed over."""
    return future if future is not None else _failed(RuntimeError("not sent"))


def _chain(source: asyncio.Future[object], target: asyncio.Future[object]) -> None:
    """Settle `target` like `source` once it is done."""

    def copy(done: asyncio.Future[object]) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif (error := done.exception()) is not None:
            target.set_exception(error)
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


class Publisher:
    def __init__(self, producer: AIOKafkaProducer, node_id: str, max_record_bytes: int) -> None:
        self.producer = producer
        # Kafka producers refuse a record over max.request.size; the per-record send()
        # checks it, the batch path does not, so it is checked here.
        self.max_record_bytes = max_record_bytes
        self.headers = [("delayq-node", node_id.encode())]
        self._lookups: set[asyncio.Task[None]] = set()  # sends waiting for metadata

    async def publish(self, fires: Sequence[Fire]) -> list[asyncio.Future[object]]:
        """Hand every record to the producer; returns one future per record (records
        in one batch share it). Errors come back through the futures, never raised."""
        futures: list[asyncio.Future[object] | None] = [None] * len(fires)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for index, fire in enumerate(fires):
            by_topic[fire.topic].append(index)
        for topic, indexes in by_topic.items():
            partitions = self.producer.client.cluster.partitions_for_topic(topic)
            if partitions:
                await self._send_topic(topic, sorted(partitions), fires, indexes, futures)
            else:
                self._send_when_known(topic, fires, indexes, futures)
        return [_sent(future) for future in futures]

    async def _send_topic(
        self,
        topic: str,
        partitions: list[int],
        fires: Sequence[Fire],
        indexes: list[int],
        futures: list[asyncio.Future[object] | None],
    ) -> None:
        """Send records of one topic whose partitions are known, a batch per partition."""
        targets: dict[int, list[int]] = defaultdict(list)
        for index in indexes:
            fire = fires[index]
            size = len(fire.key) + len(fire.value)
            if size > self.max_record_bytes:
                futures[index] = _failed(
                    MessageSizeTooLargeError(
                        f"record of {size} bytes is over the {self.max_record_bytes}-byte limit "
                        "(kafka_max_batch_bytes)"
                    )
                )
                continue
            targets[partition_of(fire.key_hash, partitions)].append(index)
        for partition, members in targets.items():
            await self._send_batches(topic, partition, fires, members, futures)

    def _send_when_known(
        self,
        topic: str,
        fires: Sequence[Fire],
        indexes: list[int],
        futures: list[asyncio.Future[object] | None],
    ) -> None:
        """Give each record a future now; a task waits for the topic's metadata (up to
        the producer's request timeout), sends them, and settles the futures."""
        loop = asyncio.get_running_loop()
        proxies: list[asyncio.Future[object]] = [loop.create_future() for _ in indexes]
        for index, proxy in zip(indexes, proxies, strict=True):
            futures[index] = proxy

        async def send() -> None:
            inner: list[asyncio.Future[object] | None] = [None] * len(fires)
            try:
                partitions = sorted(await self.producer.partitions_for(topic))
                await self._send_topic(topic, partitions, fires, indexes, inner)
            except asyncio.CancelledError:  # close(): nobody waits for these any more
                for proxy in proxies:
                    proxy.cancel()
                raise
            except Exception as exc:  # unknown topic, broker unreachable
                for proxy in proxies:
                    proxy.set_exception(exc)
                return
            for index, proxy in zip(indexes, proxies, strict=True):
                _chain(_sent(inner[index]), proxy)

        task = loop.create_task(send(), name=f"publish-to-new-topic-{topic}")
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    async def close(self) -> None:
        """Cancel the sends still waiting for a topic's metadata and wait until they
        have ended. Their records' futures fail, so their jobs are retried; called once
        the rounds that awaited them are over."""
        lookups = list(self._lookups)
        for task in lookups:
            task.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)

    async def _send_batches(
        self,
        topic: str,
        partition: int,
        fires: Sequence[Fire],
        indexes: list[int],
        futures: list[asyncio.Future[object] | None],
    ) -> None:
        batch = self.producer.create_batch()
        members: list[int] = []
        for index in indexes:
            fire = fires[index]
            if not self._append(batch, fire):
                if members:  # the batch is full: send it and start another
                    await self._submit(batch, topic, partition, members, futures)
                    batch, members = self.producer.create_batch(), []
                if not self._append(batch, fire):
                    futures[index] = _failed(
                        MessageSizeTooLargeError(
                            f"record of {len(fire.value)} bytes does not fit a batch"
                        )
                    )
                    continue
            members.append(index)
        if members:
            await self._submit(batch, topic, partition, members, futures)

    def _append(self, batch: Any, fire: Fire) -> bool:
        """Add a record to the batch; False when it does not fit."""
        added = batch.append(key=fire.key, value=fire.value, timestamp=None, headers=self.headers)
        return added is not None

    async def _submit(
        self,
        batch: Any,
        topic: str,
        partition: int,
        members: list[int],
        futures: list[asyncio.Future[object] | None],
    ) -> None:
        # A closed batch is sent at once; an open one would wait out linger_ms first,
        # for records that only producer.send() could add.
        batch.close()
        try:
            future: asyncio.Future[object] = await self.producer.send_batch(
                batch, topic, partition=partition
            )
        except Exception as exc:
            future = _failed(exc)
        for index in members:
            futures[index] = future
