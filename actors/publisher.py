"""Publishes fired jobs to Kafka as one record batch per topic partition and request.

aiokafka's per-record send() creates a future and takes a lock per record; it is cheaper
to fill one BatchBuilder per (topic, partition) and submit each batch once. Records are
partitioned by key with Kafka's default murmur2 partitioner, so a key lands on the same
partition as with any other Kafka producer. Every job gets the future of the batch it
went into. Each record carries the header "delayq-node" naming the node that published
it.

publish() never waits for the broker: it queues each record for its partition and
returns. One flusher task per partition builds a batch of everything queued and
submits it; the producer takes a partition's next batch only once its previous one has
gone out in a request (one produce request at a time per broker), so the records that
arrive meanwhile, from any number of dispatch rounds, wait in the queue and go out
together in the next request, rather than one small batch per round queued behind the
others (and the dispatcher claiming nothing while it waited).

A publisher given a lease (the node's: actors/ownership.py) checks it before each batch
it hands to the producer: records queued by a node that then froze past its ZooKeeper
session are not sent when it wakes up, but fail with LeaseLapsed (their jobs stay in
flight for the slots' owner).

publish() never waits for the broker's metadata of a topic it has not seen yet (that
wait can last the whole request timeout when the topic does not exist): records of such
a topic are sent by a task of their own once the metadata arrives, so a poison topic
never holds up the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError

from cluster.connections.kafka_conn import connection_options, report_outages
from cluster.errors import LeaseLapsed
from cluster.model.envelope import Fire, partition_of
from cluster.settings.config import Settings

log = logging.getLogger(__name__)


def make_producer(settings: Settings, transactional_id: str | None = None) -> AIOKafkaProducer:
    """The node's producer; with a transactional id, a slot's (delivery = exactly_once,
    actors/transactions.py), which is always idempotent. Connection and security options
    from cluster/connections/kafka_conn.py; its metadata exchanges end a Kafka outage in
    the log."""
    producer = AIOKafkaProducer(
        **connection_options(settings),
        client_id=f"delayq-{settings.node_id}",
        acks="all",
        enable_idempotence=settings.kafka_idempotence or transactional_id is not None,
        transactional_id=transactional_id,
        linger_ms=settings.kafka_linger_ms,
        request_timeout_ms=settings.kafka_request_timeout_ms,
        max_batch_size=256 * 1024,
        max_request_size=settings.kafka_max_batch_bytes,
    )
    report_outages(producer.client.cluster, settings)
    return producer


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
    def __init__(
        self,
        producer: AIOKafkaProducer,
        node_id: str,
        max_record_bytes: int,
        lease: Callable[[], bool] | None = None,
    ) -> None:
        self.producer = producer
        self.lease = lease  # False: the node's hold of its slots is unconfirmed
        # Kafka producers refuse a record over max.request.size; the per-record send()
        # checks it, the batch path does not, so it is checked here.
        self.max_record_bytes = max_record_bytes
        self.headers = [("delayq-node", node_id.encode())]
        self._lookups: set[asyncio.Task[None]] = set()  # sends waiting for metadata
        self._tracked: set[str] = set()  # topics named in the producer's refreshes
        # Records waiting for their partition's next batch, and the flusher serving each.
        self._queued: dict[tuple[str, int], list[tuple[list[Fire], _Group]]] = {}
        self._flushers: dict[tuple[str, int], asyncio.Task[None]] = {}

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
                self._track(topic)
                self._queue_topic(topic, sorted(partitions), fires, indexes, futures)
            else:
                self._send_when_known(topic, fires, indexes, futures)
        return [_sent(future) for future in futures]

    def _track(self, topic: str) -> None:
        """Have the producer's metadata refreshes name this topic. A client that tracks
        no topic asks the broker for all of them on every refresh (thousands on a
        shared broker); its cluster view can already hold this topic's partitions from
        such a refresh, so publishing alone would never add it."""
        if topic not in self._tracked:
            self._tracked.add(topic)
            self.producer.client.add_topic(topic)

    def _queue_topic(
        self,
        topic: str,
        partitions: list[int],
        fires: Sequence[Fire],
        indexes: list[int],
        futures: list[asyncio.Future[object] | None],
    ) -> None:
        """Queue records of one topic whose partitions are known for their partitions'
        flushers (starting those not running); a record over the size limit fails here."""
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
        loop = asyncio.get_running_loop()
        for partition, members in targets.items():
            group = _Group(loop.create_future())
            for index in members:
                futures[index] = group.future
            queue = self._queued.setdefault((topic, partition), [])
            queue.append(([fires[index] for index in members], group))
            if (topic, partition) not in self._flushers:
                self._flushers[topic, partition] = loop.create_task(
                    self._flush(topic, partition), name=f"publish-{topic}-{partition}"
                )

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
                self._queue_topic(topic, partitions, fires, indexes, inner)
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
        """Cancel the sends still waiting for a topic's metadata and the flushers, and
        wait until they have ended. Their records' futures are cancelled, so their jobs
        are retried; called once the rounds that awaited them are over."""
        tasks = [*self._lookups, *self._flushers.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for queue in self._queued.values():
            for _, group in queue:
                group.future.cancel()
        self._queued.clear()

    async def _flush(self, topic: str, partition: int) -> None:
        """Send what is queued for one partition, a batch at a time, until nothing is."""
        key = (topic, partition)
        queued: list[tuple[list[Fire], _Group]] = []
        try:
            while queued := self._queued.pop(key, []):
                batch = self.producer.create_batch()
                groups: list[_Group] = []  # those with records in this batch
                for fires, group in queued:
                    for fire in fires:
                        if not self._append(batch, fire):
                            if groups:  # the batch is full: send it and start another
                                await self._submit(batch, topic, partition, groups)
                                batch, groups = self.producer.create_batch(), []
                            if not self._append(batch, fire):  # not even alone
                                group.error = MessageSizeTooLargeError(
                                    f"record of {len(fire.value)} bytes does not fit a batch"
                                )
                                continue
                        if not groups or groups[-1] is not group:
                            group.batches += 1
                            groups.append(group)
                if groups:
                    await self._submit(batch, topic, partition, groups)
                for _, group in queued:
                    group.seal()
        except asyncio.CancelledError:  # close(): nobody waits for these any more
            for _, group in queued:
                group.future.cancel()
            raise
        finally:
            del self._flushers[key]

    def _append(self, batch: Any, fire: Fire) -> bool:
        """Add a record to the batch; False when it does not fit."""
        added = batch.append(key=fire.key, value=fire.value, timestamp=None, headers=self.headers)
        return added is not None

    async def _submit(self, batch: Any, topic: str, partition: int, groups: list[_Group]) -> None:
        """Hand a batch to the producer (waiting until the partition's previous batch
        has gone out) and tell each group with records in it how the batch ends. Not
        handed over when the lease lapsed: it ends failed with LeaseLapsed."""
        # A closed batch is sent at once; an open one would wait out linger_ms first,
        # for records that only producer.send() could add.
        batch.close()
        if self.lease is not None and not self.lease():
            log.warning(
                "not sending %d record(s) to %s-%d: ZooKeeper has not confirmed this node's "
                "slots lately; their jobs stay in flight for the slots' owner",
                batch.record_count(),
                topic,
                partition,
            )
            sent = _failed(LeaseLapsed("ZooKeeper has not confirmed this node's slots lately"))
        else:
            try:
                sent = await self.producer.send_batch(batch, topic, partition=partition)
            except Exception as exc:
                sent = _failed(exc)
        for group in groups:
            sent.add_done_callback(group.batch_done)


class _Group:
    """The records one publish() call queued for one partition: one future for them all,
    settled once every batch holding some of them has ended (failed if any failed)."""

    __slots__ = ("batches", "error", "future", "result", "sealed")

    def __init__(self, future: asyncio.Future[object]) -> None:
        self.future = future
        self.batches = 0  # batches holding some of its records that have not ended
        self.sealed = False  # every record is in a batch (or failed)
        self.error: BaseException | None = None
        self.result: object = None  # the last batch's (its RecordMetadata)

    def batch_done(self, sent: asyncio.Future[object]) -> None:
        self.batches -= 1
        # Read every batch's outcome, also after an earlier batch failed: an exception
        # never retrieved is logged by asyncio as an error when the future is freed.
        error = (
            RuntimeError("the producer dropped the batch") if sent.cancelled() else sent.exception()
        )
        if self.error is None:
            if error is not None:
                self.error = error
            else:
                self.result = sent.result()
        self._settle()

    def seal(self) -> None:
        self.sealed = True
        self._settle()

    def _settle(self) -> None:
        if not self.sealed or self.batches or self.future.done():
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.result)
